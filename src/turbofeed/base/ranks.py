"""Where this process sits in a distributed job: rank, world size, local rank.

Imports no torch: ``torch.distributed`` is asked only when the process already imported
it. Every front-end (``torch/``, ``pipeline/``, ``dali/``) uses it, so it lives in
:mod:`turbofeed.base`; ``turbofeed.torch.detect`` and ``DistEnv`` are the public names.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass

log = logging.getLogger("turbofeed")

# Checked in order after explicit arguments and torch.distributed:
# torchrun/Kubeflow, SLURM, Horovod (gloo/mpi launchers), Open MPI, MPICH/PMI.
_ENV_SCHEMES = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("horovod", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)
# Ranks per node (all nodes alike), first found: torchrun, SLURM, Horovod, Open MPI, MPICH.
_LOCAL_SIZE_VARS = ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "HOROVOD_LOCAL_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    source: str  # "arguments", "torch.distributed", "torchrun", "slurm", ... or "single"
    local_world_size: int = 1  # ranks per node; ranks are numbered node by node

    @property
    def nodes(self) -> int:
        """Nodes of the job (1 when the ranks per node are unknown or do not divide it)."""
        return self.world_size // self.local_world_size if self.world_size % self.local_world_size == 0 else 1


def detect(rank: int | None = None, world_size: int | None = None,
           local_rank: int | None = None) -> DistEnv:
    """Rank, world size and local rank from, in order: explicit arguments, an initialised
    ``torch.distributed``, torchrun/Kubeflow, SLURM, Horovod, Open MPI, PMI variables.

    ``rank`` and ``world_size`` are a pair: given, they are used as given, with one
    WARNING when a process group or launcher says otherwise (an evaluation loader
    reading everything under torchrun: ``rank=0, world_size=1``).

    Raises:
        ValueError: only one of ``rank`` and ``world_size`` given (naming the other), or
            the values found are inconsistent (rank outside the world size).
    """
    check_pair(rank, world_size)
    if rank is not None and world_size is not None:
        env = DistEnv(rank, world_size, 0 if local_rank is None else local_rank, "arguments")
        _check(env)
        _warn_if_launcher_differs(env)
    else:
        env = _from_torch() or _from_environ() or DistEnv(0, 1, 0, "single")
        if local_rank is not None:
            env = DistEnv(env.rank, env.world_size, local_rank, env.source)
        _check(env)
    return DistEnv(env.rank, env.world_size, env.local_rank, env.source, _local_world_size(env.world_size))


def check_pair(rank: int | None, world_size: int | None, names: tuple[str, str] = ("rank", "world_size")) -> None:
    """Refuse one of the pair without the other: alone, it would be silently dropped
    (``rank=1`` reading as rank 0 of 1) or mixed with a launcher's other half.

    Raises:
        ValueError: one given without the other, naming the one missing.
    """
    if (rank is None) != (world_size is None):
        given, missing = (names[0], names[1]) if world_size is None else (names[1], names[0])
        value = rank if world_size is None else world_size
        raise ValueError(f"{given}={value!r} given without {missing}: give both {names[0]} and {names[1]}, "
                         "or neither (then they come from torch.distributed or the launcher)")


def _check(env: DistEnv) -> None:
    if env.world_size < 1 or not 0 <= env.rank < env.world_size:
        raise ValueError(f"rank {env.rank} is not in [0, world_size={env.world_size}) "
                         f"(from {env.source})")


def _warn_if_launcher_differs(given: DistEnv) -> None:
    """One WARNING per (given, found) pair when a process group or launcher says another
    rank or world size: the given values are used, but the ranks may read overlapping
    or incomplete shares, which a typo would make silently."""
    found = _from_torch() or _from_environ()
    if found is None or (found.rank, found.world_size) == (given.rank, given.world_size):
        return
    with _announced_lock:
        key = ("differs", given.rank, given.world_size, f"{found.source}:{found.rank}/{found.world_size}")
        if key in _announced:
            return
        _announced.add(key)
    log.warning("turbofeed: rank=%d, world_size=%d given, but %s says rank %d of %d: using the values given "
                "(this process reads 1/%d of the data as rank %d)", given.rank, given.world_size, found.source,
                found.rank, found.world_size, given.world_size, given.rank)


def _local_world_size(world_size: int) -> int:
    """Ranks per node from the launcher's variables; ``world_size`` when it does not say
    or says something that does not divide the world (one node)."""
    for var in _LOCAL_SIZE_VARS:
        try:
            local = int(os.environ[var])
        except (KeyError, ValueError):
            continue
        if local >= 1 and world_size % local == 0:
            return local
    return world_size


def _from_torch() -> DistEnv | None:
    dist = sys.modules.get("torch.distributed")  # never import torch just to ask
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    local = int(os.environ.get("LOCAL_RANK", 0))
    return DistEnv(dist.get_rank(), dist.get_world_size(), local, "torch.distributed")


def _from_environ() -> DistEnv | None:
    for name, rank_var, size_var, local_var in _ENV_SCHEMES:
        if rank_var in os.environ and size_var in os.environ:
            return DistEnv(int(os.environ[rank_var]), int(os.environ[size_var]),
                           int(os.environ.get(local_var, 0)), name)
    return None


# (rank, world, source) already announced by this process: a job with a train and a val
# loader, or a loader read again at every pass, says it once.
_announced: set[tuple[str, int, int, str]] = set()
_announced_lock = threading.Lock()


def _once(kind: str, env: DistEnv) -> bool:
    with _announced_lock:
        key = (kind, env.rank, env.world_size, env.source)
        if key in _announced:
            return False
        _announced.add(key)
        return True


class RankChoice:
    """``enable_distributed`` resolved into this process's share, read again whenever a
    loader plans a pass (Lightning builds its loaders before or after
    ``init_process_group`` depending on where the user builds them; Accelerate's
    ``prepare()`` hands the loader back unchanged, often built before the process group).

    ====================  ========================================================
    ``enable_distributed``  the share
    ====================  ========================================================
    ``None`` (default)    split where ``torch.distributed`` is initialised or a
                          launcher says world size > 1 (one WARNING naming it);
                          the whole dataset in a single process
    ``True``              split as the launcher or process group says (world 1: all)
    ``False``             the whole dataset on every rank (one WARNING when a
                          launcher says world size > 1)
    ``rank``/``world_size`` given  that share, whatever the environment says (one
                          WARNING when it says otherwise); one without the
                          other is a ``ValueError``
    ====================  ========================================================
    """

    def __init__(self, enable_distributed: bool | None, rank: int | None, world_size: int | None) -> None:
        if enable_distributed not in (None, True, False):
            raise ValueError(f"enable_distributed must be None (auto), True or False, got {enable_distributed!r}")
        check_pair(rank, world_size)
        self.mode = enable_distributed
        self.fixed = rank is not None
        self.rank, self.world_size = rank, world_size

    def resolve(self) -> DistEnv:
        """The share to use now (cheap: a dictionary look-up and a few variables).

        Raises:
            ValueError: the values found are inconsistent (rank outside the world size).
        """
        if self.fixed:
            return detect(self.rank, self.world_size)
        found = detect()
        if self.mode is False:
            if found.world_size > 1 and _once("whole", found):
                log.warning("turbofeed: enable_distributed=False: %s says there are %d ranks, and every one "
                            "of them reads the whole dataset; leave enable_distributed unset to split it",
                            found.source, found.world_size)
            return DistEnv(0, 1, 0, "arguments", 1)  # warned above: no "given values differ" warning
        if found.world_size > 1 and self.mode is None and _once("split", found):
            log.warning("turbofeed: splitting the data across %d ranks: this is rank %d (from %s); "
                        "enable_distributed=False reads all of it on every rank",
                        found.world_size, found.rank, found.source)
        return found
