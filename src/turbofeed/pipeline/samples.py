"""``turbofeed.Pipeline``: the sample-level API (``start / next_batch(n) / stop``)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..decode import decode
from ..io import Dataset
from ..io.paths import PathSpec
from ..io.s3config import S3Config
from ..plan import make_epoch_plan
from ..transforms import Compose
from .policy import ErrorPolicy
from .stats import Stats
from .stream import BatchStream
from .work import SampleWork

_CHUNK = 32  # samples per unit of work inside the pipeline; next_batch(n) regroups them


@dataclass
class Sample:
    """One sample: ``key``, ``label`` (-1 if none), ``shard``, and its image.

    ``data`` holds the encoded bytes when the pipeline does not decode
    (``decode_jpeg=False``); ``get_image()`` then decodes on demand.
    """

    key: str
    label: int
    shard: str
    data: bytes | None = field(default=None, repr=False)
    image: np.ndarray | None = field(default=None, repr=False)

    def get_image(self) -> np.ndarray:
        """The image as HWC uint8 RGB (float if the pipeline's transform normalises)."""
        if self.image is None:
            if self.data is None:
                raise ValueError(f"sample {self.shard}/{self.key} has no image data")
            self.image = decode(self.data)
        return self.image

    def get_gpu_tensor(self, device: Any = "cuda") -> Any:
        """The image as a CUDA tensor (HWC). Needs PyTorch with a GPU."""
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("get_gpu_tensor() needs a CUDA GPU; use get_image() on this machine")
        return torch.from_numpy(np.ascontiguousarray(self.get_image())).to(device, non_blocking=False)


class Pipeline:
    """Read, decode and optionally transform samples with worker threads, in a fixed order.

    Args:
        tar_paths: anything :class:`turbofeed.DataLoader` accepts (tars, patterns, folders).
        num_workers: worker threads.
        decode_jpeg: decode images (else samples carry the encoded bytes).
        shuffle, seed: the order, a pure function of (seed, epoch).
        transform: optional :class:`turbofeed.transforms.Compose` applied per sample.
        on_error: ``"replace"``, ``"skip"`` or ``"raise"`` for bad samples.
        rank, world_size: this process's share of the data (strided split).
        gpu_decode, device_id: accepted for compatibility; decoding runs on the CPU.
        s3: endpoint, credentials, cache and retry settings for ``s3://`` paths (a
            :class:`turbofeed.io.s3client.S3Config`; default: the AWS variables and profile).
        format, format_options: what the paths are and the names inside HDF5, Zarr, .npy
            and Parquet sources (as for :class:`turbofeed.DataLoader`).

    Example::

        pipe = turbofeed.Pipeline(tar_paths=["shard-000000.tar"], num_workers=4)
        pipe.start()
        while batch := pipe.next_batch(32):   # [] at the end of the epoch
            for s in batch:
                img = s.get_image()            # (H, W, 3) uint8
        pipe.stop()
    """

    def __init__(self, tar_paths: PathSpec, num_workers: int = 4, decode_jpeg: bool = True, *,
                 shuffle: bool = False, seed: int = 0, transform: Compose | list | None = None,
                 on_error: str = "replace", rank: int = 0, world_size: int = 1,
                 gpu_decode: bool = False, device_id: int = 0, prefetch: int | None = None,
                 cache_dir: str | None = None, format: str | None = None,
                 format_options: dict | None = None, s3: S3Config | None = None) -> None:
        self.stats = Stats()
        self._policy = ErrorPolicy(on_error, self.stats)
        self.dataset = Dataset(tar_paths, on_damage="raise" if on_error == "raise" else "skip",
                               cache_dir=cache_dir, format=format, format_options=format_options, s3=s3)
        self.stats.skipped_at_index = len(self.dataset.problems)
        self.stats.damaged_shards = list(self.dataset.damaged)
        self.transform = Compose(transform) if isinstance(transform, (list, tuple)) else transform
        self.num_workers = num_workers
        self.decode_jpeg = decode_jpeg
        self.shuffle = shuffle
        self.seed = seed
        self.rank, self.world_size = rank, world_size
        self.gpu_decode, self.device_id = gpu_decode, device_id
        self.prefetch = prefetch or max(2, num_workers)
        self.epoch = 0
        self._stream: BatchStream | None = None
        self._ready: deque[Sample] = deque()

    def __len__(self) -> int:
        """Samples per epoch for this rank."""
        return len(make_epoch_plan(self.dataset.num_samples, batch_size=1, seed=self.seed, epoch=0,
                                   shuffle=False, rank=self.rank, world_size=self.world_size).order)

    def set_epoch(self, epoch: int) -> None:
        """Restart at the beginning of ``epoch`` (its own shuffle)."""
        self.stop()
        self.epoch = int(epoch)

    def start(self) -> None:
        """Start the worker threads for the current epoch (no-op if running)."""
        if self._stream is not None:
            return
        plan = make_epoch_plan(self.dataset.num_samples, batch_size=_CHUNK, seed=self.seed,
                               epoch=self.epoch, shuffle=self.shuffle, rank=self.rank,
                               world_size=self.world_size)
        work = SampleWork(self.dataset, self.transform, self.stats, seed=self.seed, epoch=self.epoch)
        dataset = self.dataset

        def fill(gid: int, slot: list, j: int) -> None:
            shard, key = dataset.describe(gid)
            sample = Sample(key, int(dataset.labels[gid]), shard)
            if self.decode_jpeg:
                loaded = work.load(gid)
                sample.image = np.ascontiguousarray(loaded.pixels[:, ::-1]) if loaded.flip else loaded.pixels
            else:
                sample.data = work.fetch(gid)
            slot[j] = sample

        self._stream = BatchStream(plan, fill, lambda: [None] * _CHUNK, self._policy,
                                   num_workers=self.num_workers, prefetch=self.prefetch)

    def next_batch(self, n: int) -> list[Sample]:
        """Up to ``n`` next samples in order; fewer at the end; ``[]`` once the epoch is done.

        Raises:
            SampleError: a bad sample under ``on_error="raise"``.
        """
        if self._stream is None:
            self.start()
        while len(self._ready) < n:
            job = next(self._stream, None)
            if job is None:
                break
            self._ready.extend(s for s, ok in zip(job.slot, job.ok) if ok and s is not None)
            self.stats.count("batches")
        out = [self._ready.popleft() for _ in range(min(n, len(self._ready)))]
        self.stats.count("samples", len(out))
        return out

    def __iter__(self):
        """Samples of the rest of the epoch, one by one."""
        while batch := self.next_batch(_CHUNK):
            yield from batch

    def stop(self) -> None:
        """Stop the worker threads; idempotent. The next ``next_batch`` starts the epoch over."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self._ready.clear()

    def __enter__(self) -> "Pipeline":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
