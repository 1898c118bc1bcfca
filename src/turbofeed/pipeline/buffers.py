"""Reusable batch slots: workers write samples straight into them."""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

# sys.getrefcount of an array referenced only by its Slot (the attribute, plus the
# argument of getrefcount itself).
_UNSHARED = 2


class Slot:
    """One batch buffer: ``images`` (batch, ...) and ``labels`` (batch,) int64."""

    __slots__ = ("images", "labels")

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images = images
        self.labels = labels

    def unshared(self) -> bool:
        """True when no tensor or view handed to the user still points into ``images``."""
        return sys.getrefcount(self.images) <= _UNSHARED


class SlotPool:
    """Hands out slots, reusing a returned slot only once the user let go of its batch.

    A returned slot waits in a short queue until no tensor points into it; a user who
    keeps batches (``kept.append(images)``) pushes old slots out of the queue instead
    of having them overwritten, so a kept batch never changes under the user's feet.
    Slots waiting: at most ``capacity``.
    """

    def __init__(self, make: Callable[[], Slot], capacity: int) -> None:
        self._make = make
        self._returned: deque[Slot] = deque(maxlen=capacity)
        self.allocated = 0

    def acquire(self) -> Slot:
        for slot in self._returned:
            if slot.unshared():
                self._returned.remove(slot)
                return slot
        self.allocated += 1
        return self._make()

    def release(self, slot: Slot) -> None:
        self._returned.append(slot)


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
