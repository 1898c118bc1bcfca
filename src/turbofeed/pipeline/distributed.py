"""``turbofeed.DistributedPipeline``: the sample-level API, one strided share per rank."""

from __future__ import annotations

import sys
from typing import Any

from ..base.ranks import detect
from ..datasets import Dataset, Mix
from ..io import PathSpec
from .samples import Pipeline


class DistributedPipeline(Pipeline):
    """A :class:`Pipeline` that reads only this rank's share of each epoch.

    Rank, world size and local rank come from the arguments, else an initialised
    ``torch.distributed``, else torchrun/Kubeflow, SLURM, Horovod, Open MPI or PMI
    variables (:func:`turbofeed.torch.detect`). Ranks get disjoint strided shares of
    the same per-epoch order and equal sample counts (wrap-around padding).

    Example::

        pipe = turbofeed.DistributedPipeline.init_from_env(tar_paths=shards, num_workers=8, shuffle=True)
        pipe.set_epoch(epoch)
        while batch := pipe.next_batch(64):
            ...
        pipe.barrier()
    """

    def __init__(self, tar_paths: Dataset | Mix | PathSpec, rank: int | None = None, world_size: int | None = None,
                 local_rank: int | None = None, num_workers: int | None = None, decode_jpeg: bool = True,
                 gpu_decode: bool | Any = False, shuffle: bool = False, **kwargs: Any) -> None:
        env = detect(rank, world_size, local_rank)
        self.local_rank = env.local_rank
        self.env_source = env.source
        super().__init__(tar_paths, num_workers=num_workers, decode_jpeg=decode_jpeg, shuffle=shuffle,
                         rank=env.rank, world_size=env.world_size, gpu_decode=gpu_decode,
                         device_id=env.local_rank, **kwargs)

    @classmethod
    def init_from_env(cls, tar_paths: Dataset | Mix | PathSpec, **kwargs: Any) -> "DistributedPipeline":
        """Build with rank, world size and local rank detected from the environment."""
        return cls(tar_paths, **kwargs)

    def barrier(self) -> None:
        """Wait for every rank (through ``torch.distributed``); a no-op in a world of one.

        Raises:
            RuntimeError: world size > 1 but ``torch.distributed`` is not initialised.
        """
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.barrier()
        elif self.world_size > 1:
            raise RuntimeError("DistributedPipeline.barrier() needs torch.distributed.init_process_group() "
                               f"(rank {self.rank} of {self.world_size}, from {self.env_source})")

    def __repr__(self) -> str:
        return (f"DistributedPipeline(rank={self.rank}/{self.world_size}, local_rank={self.local_rank}, "
                f"samples={len(self)})")
