"""Batch slots for aspect-ratio buckets: one pool per bucket's output size, and a batch's
slot taken from its bucket's pool when its first sample is loaded.

Every sample of a bucketed batch (its replacements too) is of one bucket
(:mod:`turbofeed.plan.buckets`), so the first worker that loads one of them picks the
slot for all: the fused decode then writes each image straight into its row, as for a
transform of one output size (no per-sample array, no stacking copy).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from .slots import Slot, SlotPool, SlotPools


class PendingSlot:
    """A batch's slot, taken from the pool of its samples' bucket on first use."""

    __slots__ = ("_pools", "_groups", "slot", "_lock")

    def __init__(self, pools: Sequence[SlotPool], groups: np.ndarray) -> None:
        self._pools = pools
        self._groups = groups
        self.slot: Slot | None = None
        self._lock = threading.Lock()

    def for_sample(self, gid: int) -> Slot:
        """The slot (taken now from the pool of ``gid``'s bucket if none was yet)."""
        slot = self.slot
        if slot is None:
            with self._lock:
                if self.slot is None:
                    self.slot = self._pools[int(self._groups[gid])].acquire()
                slot = self.slot
        return slot

    def taken(self) -> Slot:
        """The slot the batch's samples went to (the first bucket's for a batch whose every
        sample was skipped: it holds no row)."""
        if self.slot is None:
            self.slot = self._pools[0].acquire()
        return self.slot


class BucketPool:
    """``acquire()`` a :class:`PendingSlot` over one pool per bucket."""

    def __init__(self, pools: Sequence[SlotPool], groups: np.ndarray) -> None:
        self.pools = pools
        self.groups = groups

    def acquire(self) -> PendingSlot:
        return PendingSlot(self.pools, self.groups)


class BucketSlotPools:
    """The loader's slots for bucketed batches, kept across passes: a
    :class:`~turbofeed.engine.slots.SlotPools` per bucket size; called as ``SlotPools``
    is (``pool(dtype, channels_last)``), with the bucket of each sample id.

    Args:
        batch_size, pinned, capacity: as :class:`~turbofeed.engine.slots.SlotPools`.
        sizes: each bucket's output (height, width).
    """

    def __init__(self, batch_size: int, sizes: Sequence[tuple[int, int]], *, pinned: bool, capacity: int) -> None:
        self.sizes = tuple(sizes)
        self.per_bucket = [SlotPools(batch_size, size, pinned=pinned, capacity=capacity) for size in sizes]

    def pool(self, groups: np.ndarray):  # -> Callable[[np.dtype, bool], BucketPool]
        """``pool(dtype, channels_last)`` for a pass whose samples have buckets ``groups``."""
        def make(dtype: np.dtype, channels_last: bool) -> BucketPool:
            return BucketPool([p(dtype, channels_last) for p in self.per_bucket], groups)
        return make
