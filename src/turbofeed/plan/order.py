"""The order of one epoch: a pure function of sizes, seed, epoch, rank and world size.

No I/O, no clock, no global random state. Everything the loader does to keep ranks
in step (equal batch counts), to be deterministic and to resume in O(1) comes from
here.

Distributed split (strided, as users of DistributedSampler expect), for a global
order ``g`` of 10 samples, world size 3::

    drop_last=False (pad by wrap-around to 12 = 4 per rank)
        rank 0: g0 g3 g6 g9
        rank 1: g1 g4 g7 g0   <- g0 again, wrapped
        rank 2: g2 g5 g8 g1   <- g1 again, wrapped
    drop_last=True (cut to 9 = 3 per rank)
        rank 0: g0 g3 g6
        rank 1: g1 g4 g7
        rank 2: g2 g5 g8
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def epoch_permutation(num_samples: int, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """Return the global order of one epoch.

    Returns:
        int64 array of shape ``(num_samples,)``, a permutation of ``range(num_samples)``;
        the identity when ``shuffle`` is False. Same (seed, epoch) -> same array.
    """
    if not shuffle:
        return np.arange(num_samples, dtype=np.int64)
    rng = np.random.default_rng([seed, epoch])
    return rng.permutation(num_samples).astype(np.int64, copy=False)


def rank_order(
    num_samples: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = False,
) -> np.ndarray:
    """Return the sample ids that ``rank`` sees in ``epoch``, in order.

    Every rank gets the same count: ``ceil(n / world_size)`` (wrap-around padding)
    or, with ``drop_last``, ``floor(n / world_size)``.

    Returns:
        int64 array of shape ``(per_rank,)``.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    order = epoch_permutation(num_samples, seed=seed, epoch=epoch, shuffle=shuffle)
    if drop_last:
        total = (num_samples // world_size) * world_size
        order = order[:total]
    else:
        total = -(-num_samples // world_size) * world_size
        if total != num_samples and num_samples > 0:
            order = np.resize(order, total)  # np.resize repeats from the start: wrap-around
    return order[rank::world_size]


def count_batches(per_rank: int, batch_size: int, drop_last: bool) -> int:
    """Number of batches a rank takes: full batches only with ``drop_last``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return per_rank // batch_size if drop_last else -(-per_rank // batch_size)


@dataclass(frozen=True)
class EpochPlan:
    """This rank's epoch cut into batches.

    Attributes:
        order: int64 sample ids in delivery order (see :func:`rank_order`).
        batch_size: samples per batch; the last batch is smaller unless ``drop_last``.
        drop_last: drop the final partial batch.
    """

    order: np.ndarray
    batch_size: int
    drop_last: bool

    def __len__(self) -> int:
        return count_batches(len(self.order), self.batch_size, self.drop_last)

    def batch_positions(self, index: int) -> range:
        """Positions in ``order`` that make batch ``index``."""
        start = index * self.batch_size
        return range(start, min(start + self.batch_size, len(self.order)))

    def replacement_positions(self, position: int) -> range:
        """Positions to try, in turn, when the sample at ``position`` is bad.

        The next samples of this rank's order, wrapping around, so the choice is
        deterministic and needs no extra state for resume.
        """
        n = len(self.order)
        return range(position + 1, position + n)  # callers take ``p % n``


def make_epoch_plan(
    num_samples: int,
    *,
    batch_size: int,
    seed: int,
    epoch: int,
    shuffle: bool,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = False,
) -> EpochPlan:
    """Build the :class:`EpochPlan` of one rank for one epoch."""
    order = rank_order(
        num_samples, seed=seed, epoch=epoch, shuffle=shuffle,
        rank=rank, world_size=world_size, drop_last=drop_last,
    )
    count_batches(len(order), batch_size, drop_last)  # validates batch_size
    return EpochPlan(order=order, batch_size=batch_size, drop_last=drop_last)
