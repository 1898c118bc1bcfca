"""A resampled epoch, drawn lazily: the sample at position ``p`` of the epoch's global order
is a pure function of ``(seed, epoch, p)``, computed when asked, so an epoch of any size
(``epoch_size=2_000_000_000``) starts at once and takes memory for the shards, not for
the epoch.

Positions come in blocks of :data:`BLOCK`; block ``b`` is drawn from its own generator
``default_rng([seed, epoch, _TAG, b])`` (counter-based: no block depends on another), each
position independently:

1. its group (dataset of a mix) with probability ``weights[g] / sum(weights)`` (one group
   without weights): the weights hold in expectation, not exactly per epoch;
2. a sample of that group uniformly (every sample of a dataset has the same expected
   count; a shard's share is its size's, as when whole shards are drawn uniformly).

For shard sizes ``[3, 2]`` (ids 0-2 | 3-4), ``weights`` none::

    position   0  1  2  3  4  5  6 ...      each one of 0..4 with probability 1/5,
    sample     3  0  0  4  2  1  3 ...      a function of (seed, epoch, position)

The draws are already in random order, so ``shuffle`` changes nothing here. Ranks split
the global order strided, with wrap-around padding or ``drop_last``, exactly as
:func:`turbofeed.plan.order.rank_order` does: :class:`ResampledRankOrder` is its lazy form.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .lazy_chunks import LazyChunks

_SHIFT = 16
BLOCK = 1 << _SHIFT  # positions drawn together: ~2 ms, 512 KiB of ids
_CACHED = 8  # blocks kept per epoch (ranks read nearby positions; threads a few batches apart)
_TAG = 0x727332  # "rs2": keeps these draws apart from the other uses of (seed, epoch)


class ResampledEpoch(LazyChunks[np.ndarray]):
    """The global order of one resampled epoch: ``size`` positions, drawn on demand.

    Args:
        shard_sizes: samples per shard; shard ``k`` holds ids ``sum(shard_sizes[:k]) ..``.
        seed, epoch: what the draws are a function of (with the position).
        size: positions in the epoch (``epoch_size``).
        groups: group of each shard (``0..G-1``), with ``weights``.
        weights: one per group, ``>= 0``, positive sum, every group with a positive
            weight non-empty (checked by :class:`~turbofeed.plan.mixing.EpochDraw`'s callers
            through :func:`~turbofeed.plan.mixing.draw_epoch`'s rules).

    Thread-safe: blocks are cached under a lock; a block drawn twice is the same block.
    """

    def __init__(self, shard_sizes: np.ndarray | Sequence[int], *, seed: int, epoch: int, size: int,
                 groups: np.ndarray | None = None, weights: Sequence[float] | None = None) -> None:
        sizes = np.asarray(shard_sizes, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        g = np.zeros(len(sizes), np.int64) if weights is None or groups is None else np.asarray(groups, np.int64)
        w = np.array([1.0] if weights is None else weights, dtype=np.float64)
        if size > 0 and not starts[-1]:
            raise ValueError(f"epoch_size {size} needs samples, but all shards are empty")
        # shards grouped (stable, so each group's shards stay in dataset order): the group's
        # samples are ``q = goff[g] .. goff[g+1]-1`` of this concatenation
        by_group = np.argsort(g, kind="stable")
        self._shard = by_group[sizes[by_group] > 0]
        self._first = np.concatenate([[0], np.cumsum(sizes[self._shard])]).astype(np.int64)[:-1]
        self._starts = starts
        counts = np.bincount(g, weights=sizes, minlength=len(w)).astype(np.int64)
        self._goff = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        live = (w > 0) & (counts > 0)
        if size > 0 and not live.any():
            raise ValueError(f"weights {list(w)} give no group with samples")
        self._groups = np.flatnonzero(live)
        self._cum = np.cumsum(w[live]) / w[live].sum()
        self._cum[-1:] = 1.0  # no draw falls past the last group by rounding (none: no group, size 0)
        self.seed, self.epoch = int(seed), int(epoch)
        super().__init__(size, BLOCK, _CACHED, np.zeros(0, np.int64))

    def _compute(self, b: int) -> np.ndarray:
        """Sample ids of positions ``b * BLOCK ..`` (a whole block, past the end included)."""
        rng = np.random.default_rng([self.seed, self.epoch, _TAG, b])
        u = rng.random((2, BLOCK))  # per position: its group, then its sample in the group
        group = self._groups[np.searchsorted(self._cum, u[0], side="right")] if len(self._groups) > 1 \
            else np.full(BLOCK, self._groups[0])
        first, count = self._goff[group], self._goff[group + 1] - self._goff[group]
        # floor(u * count) is uniform over 0..count-1 (the minimum guards a product rounded up to count)
        q = first + np.minimum((u[1] * count).astype(np.int64), count - 1)
        k = np.searchsorted(self._first, q, side="right") - 1  # the shard (grouped order)
        return self._starts[self._shard[k]] + (q - self._first[k])

    def _ids(self, chunk: np.ndarray) -> np.ndarray:
        return chunk

    def __getitem__(self, position: int) -> int:
        return int(self.chunk(position >> _SHIFT)[position & (BLOCK - 1)])


class ResampledRankOrder:
    """One rank's lazy order over a :class:`ResampledEpoch` (any lazy global order): what
    :func:`turbofeed.plan.order.rank_order` returns for the epoch's global order, without
    holding it. Element ``j`` is the global position ``start + rank + j * world_size``, or,
    in the wrap-around padding past the end, position ``j * world_size + rank - rest``
    from the start of the order (``rest = size - start``)::

        size 10, start 4, world_size 3, rank 1 -> positions 5 8 1   (1: wrapped)

    Supports ``len``, ``order[j]`` (an int), ``order[array or slice]`` (an int64 array),
    iteration (ints) and :meth:`tolist`, as the plan's ``order`` array does.
    """

    def __init__(self, epoch: LazyChunks[Any], *, rank: int, world_size: int, drop_last: bool,
                 start: int) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        if start < 0:
            raise ValueError(f"start must be >= 0, got {start}")
        self.epoch = epoch
        self.rank, self.world_size = rank, world_size
        self.start = min(start, len(epoch))
        rest = len(epoch) - self.start
        if drop_last:
            self._n = rest // world_size
        else:
            self._n = -(-rest // world_size) if len(epoch) else 0
        self._rest = rest
        self._real_from(self.start + rank)

    def _real_from(self, first: int) -> None:
        """Elements ``j < _real`` are at position ``first + j * world_size`` (the rest:
        padding, through :meth:`positions`)."""
        self._first = first
        self._real = min(self._n, max(0, -(-(len(self.epoch) - first) // self.world_size)))

    def __len__(self) -> int:
        return self._n

    def positions(self, j: np.ndarray) -> np.ndarray:
        """The global positions of elements ``j`` (int64 array)."""
        i = self.rank + np.asarray(j, dtype=np.int64) * self.world_size  # in the rest, padded
        return np.where(i < self._rest, self.start + i, i - self._rest)

    def __getitem__(self, j: int | slice | np.ndarray) -> int | np.ndarray:
        if isinstance(j, (int, np.integer)):  # the per-sample path first
            j = int(j)
            if j < 0:
                j += self._n
            if not 0 <= j < self._n:
                raise IndexError(f"index {j} out of range for {self._n} positions")
            if j < self._real:
                return self.epoch[self._first + self.world_size * j]
            return int(self.epoch.at(self.positions(np.array([j])))[0])  # padding: at most one per rank
        if isinstance(j, slice):
            return self.epoch.at(self.positions(np.arange(*j.indices(self._n), dtype=np.int64)))
        return self.epoch.at(self.positions(j))

    def __iter__(self) -> Iterator[int]:
        step = max(1, BLOCK // self.world_size)
        for lo in range(0, self._n, step):
            yield from self.epoch.at(self.positions(np.arange(lo, min(lo + step, self._n)))).tolist()

    def tolist(self) -> list[int]:
        """Every element as a list (``len(self)`` of them: for small epochs)."""
        return list(self)
