"""Reusable batch slots and their lifecycle: workers write samples straight into them.

A slot goes ``free -> filling -> delivered -> free``:

1. :meth:`SlotPool.acquire` hands out a free slot (or a new one) for a batch;
2. the worker threads write the batch into it;
3. the consumer gets the batch through a handle: :meth:`Slot.lend` returns a fresh
   NumPy view; when it dies (with the last tensor made from it) a weak reference's
   callback returns the slot, or the owner calls :meth:`SlotPool.release` itself (a
   slot whose copy to the GPU finished). No reference-count peeking, which CPython 3.14
   and free-threaded builds change;
4. a returned slot is free again at the next :meth:`SlotPool.acquire`.

The callback is ``deque.append``, a C function: no Python code runs when a tensor dies
(a ``weakref.finalize`` callback would, and a Ctrl-C arriving in it is swallowed as
"Exception ignored"), and it is safe in whatever thread drops the tensor.

A user who keeps batches (``kept.append(images)``) keeps their slots lent, so a kept
batch never changes under the user's feet; the pool makes new slots meanwhile.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


class Slot:
    """One batch buffer: ``images`` (batch, ...) and ``labels`` (batch,) int64."""

    __slots__ = ("images", "labels", "pool", "__weakref__")

    def __init__(self, images: np.ndarray, labels: np.ndarray, pool: SlotPool | None = None) -> None:
        self.images = images
        self.labels = labels
        self.pool = pool

    def lend(self, n: int) -> np.ndarray:
        """The first ``n`` images as a new array that returns this slot to its pool when
        it dies (with every tensor or view made from it: ``torch.from_numpy`` keeps the
        array it was given alive for as long as its storage lives)."""
        view = self.images[:n]
        if self.pool is not None:
            self.pool.lent(self, view)
        return view


class SlotPool:
    """Hands out slots; a slot is reused only after it was released (see the module doc).

    Args:
        make: a new slot's arrays ``(images, labels)``.
        capacity: free slots kept for reuse; more released ones are dropped (freed).
    """

    def __init__(self, make: Callable[[], tuple[np.ndarray, np.ndarray]], capacity: int) -> None:
        self._make = make
        self._free: deque[Slot] = deque()
        self._capacity = max(1, capacity)
        self._lock = threading.Lock()
        self._lent: dict[int, tuple[weakref.ref, Slot]] = {}  # id(handle) -> (handle, its slot)
        self._returned: deque[weakref.ref] = deque()  # handles whose array died (the callback)
        self.allocated = 0

    def lent(self, slot: Slot, handle: np.ndarray) -> None:
        """``slot`` is out until ``handle`` dies."""
        ref = weakref.ref(handle, self._returned.append)
        with self._lock:
            self._lent[id(ref)] = (ref, slot)

    def acquire(self) -> Slot:
        with self._lock:
            while self._returned:  # slots whose arrays died since the last call
                _, slot = self._lent.pop(id(self._returned.popleft()))
                if len(self._free) < self._capacity:
                    self._free.append(slot)
            if self._free:
                return self._free.popleft()
            self.allocated += 1
        images, labels = self._make()
        return Slot(images, labels, self)

    def release(self, slot: Slot) -> None:
        """``slot`` is free again: nothing handed out points into it any more."""
        with self._lock:
            if len(self._free) < self._capacity:
                self._free.append(slot)

    def free(self) -> int:
        """Slots waiting for reuse."""
        with self._lock:
            return len(self._free)


class SlotPools:
    """The batch slots of one loader, one pool per (layout, dtype), kept across passes.

    Args:
        batch_size: rows per slot.
        size: (height, width) of every image.
        pinned: page-locked host memory (fast async copies to the GPU).
        capacity: free slots each pool keeps.
    """

    def __init__(self, batch_size: int, size: tuple[int, int], *, pinned: bool, capacity: int) -> None:
        self.batch_size = batch_size
        self.size = size
        self.pinned = pinned
        self.capacity = capacity
        self.pools: dict[tuple, SlotPool] = {}

    def __call__(self, dtype: np.dtype, channels_last: bool) -> SlotPool:
        """The pool of slots holding ``(batch, H, W, 3)`` (``channels_last``) or
        ``(batch, 3, H, W)`` images of ``dtype``."""
        h, w = self.size
        shape = (self.batch_size, h, w, 3) if channels_last else (self.batch_size, 3, h, w)
        key = (shape, np.dtype(dtype).name)
        if key not in self.pools:
            def make() -> tuple[np.ndarray, np.ndarray]:
                return make_array(shape, dtype, self.pinned), np.empty(self.batch_size, dtype=np.int64)
            self.pools[key] = SlotPool(make, self.capacity)
        return self.pools[key]


def make_array(shape: tuple[int, ...], dtype: np.dtype, pin: bool) -> np.ndarray:
    """A host array, in page-locked (pinned) memory when ``pin`` and CUDA are available,
    so host-to-device copies run asynchronously."""
    if pin:
        import torch

        return torch.empty(shape, dtype=_TORCH_DTYPES[np.dtype(dtype).name](), pin_memory=True).numpy()
    return np.empty(shape, dtype=dtype)


def _torch_dtype(name: str) -> Callable[[], torch.dtype]:
    def get() -> torch.dtype:
        import torch

        return getattr(torch, name)
    return get


_TORCH_DTYPES = {n: _torch_dtype(n) for n in ("uint8", "float16", "float32", "float64")}
