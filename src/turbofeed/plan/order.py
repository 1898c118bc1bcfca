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

from .resampled import ResampledRankOrder

#: A rank's order of sample ids: an int64 array, or a resampled epoch's lazy view of one
#: (:class:`ResampledRankOrder`, or its streamed form :class:`~.stream_rounds.RoundsRankOrder`).
Order = np.ndarray | ResampledRankOrder


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
    start: int = 0,
    population: np.ndarray | None = None,
) -> np.ndarray:
    """Return the sample ids that ``rank`` sees in ``epoch``, in order.

    Every rank gets the same count: ``ceil(rest / world_size)`` (wrap-around padding
    from the start of the epoch's order) or, with ``drop_last``,
    ``floor(rest / world_size)``, where ``rest = num_samples - start``.

    ``start`` skips a prefix of the epoch's global order that earlier steps consumed.
    Because the split is strided, ``k`` batches of ``b`` samples on ``W`` ranks consume
    exactly the global prefix of length ``k * b * W``; resuming with ``start`` set to it
    continues the epoch without repeating or losing a sample, for any new world size
    (and for the same world size, exactly as if never interrupted)::

        global order  g0 g1 g2 g3 | g4 g5 g6 g7 g8 g9      start = 4 (2 batches of 1, W=2)
        W=3 after it  rank 0: g4 g7 g0   rank 1: g5 g8 g1   rank 2: g6 g9 g2

    ``population`` (a resampled or weighted epoch's ids, ``num_samples`` of them) is
    what the permutation orders, instead of ``0 .. num_samples-1``.

    Returns:
        int64 array of shape ``(per_rank,)``.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    order = epoch_permutation(num_samples, seed=seed, epoch=epoch, shuffle=shuffle)
    if population is not None:
        order = np.asarray(population, dtype=np.int64)[order]
    rest = order[min(start, num_samples):]
    if drop_last:
        rest = rest[:(len(rest) // world_size) * world_size]
    else:
        pad = -len(rest) % world_size
        if pad and num_samples > 0:
            # np.resize repeats the epoch's order from its start: wrap-around padding.
            rest = np.concatenate([rest, np.resize(order, pad)])
    return rest[rank::world_size]


def count_batches(per_rank: int, batch_size: int, drop_last: bool) -> int:
    """Number of batches a rank takes: full batches only with ``drop_last``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return per_rank // batch_size if drop_last else -(-per_rank // batch_size)


@dataclass(frozen=True)
class EpochPlan:
    """This rank's epoch cut into batches.

    Attributes:
        order: int64 sample ids in delivery order (see :func:`rank_order`); for a
            resampled epoch, a lazy sequence of them (:class:`ResampledRankOrder`:
            ``len``, ``order[i]``, slices, iteration), never the whole array.
        batch_size: samples per batch; the last batch is smaller unless ``drop_last``.
        drop_last: drop the final partial batch.
        blocks: for a streamed order held whole, the block of each element (int64, as
            ``order``; :func:`~turbofeed.plan.streaming.stream_blocks`): the fetch stage
            holds a shard for each block that reads it. None otherwise (a resampled
            streamed order tells its blocks round by round).
        groups: with aspect-ratio buckets, the bucket of each sample id (int64, indexed
            by id): a bad sample is replaced by one of its own bucket. None otherwise.
    """

    order: Order
    batch_size: int
    drop_last: bool
    blocks: np.ndarray | None = None
    groups: np.ndarray | None = None

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
