"""A bounded pool of host staging buffers (pinned when CUDA is present) for GPU transfers.

Bytes between storage and a GPU buffer that cannot go by cuFile pass through one of
these: storage -> staging (``pread`` or a ranged GET) -> device (an async copy from
pinned memory, which is what lets the DMA engine run without a driver-side bounce).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .errors import GDSError

_POLL_S = 0.1  # how often a waiting thread looks at the closed flag


@dataclass
class Staging:
    """One staging buffer: ``size`` bytes seen as a ``memoryview`` and a uint8 tensor."""

    view: memoryview
    tensor: Any
    size: int


class StagingPool:
    """``count`` buffers of ``size`` bytes, lent one per transfer.

    Invariant: buffers lent out <= ``count``, so host memory held <= ``count * size``.
    Buffers are allocated on first demand and kept (pinned allocation is slow) until
    :meth:`close`. A thread asking for a buffer when all are lent waits, looking every
    0.1 s at whether the pool was closed.

    Args:
        count: buffers at most (``GDSConfig.staging_buffers``).
        size: bytes per buffer (``GDSConfig.max_transfer_size``).
        pinned: page-locked memory; default: when PyTorch sees CUDA.
    """

    def __init__(self, count: int, size: int, pinned: bool | None = None) -> None:
        if count < 1 or size < 1:
            raise ValueError(f"StagingPool needs count >= 1 and size >= 1, got {count} and {size}")
        self.count = count
        self.size = size
        self._pinned = pinned
        self._free: list[Staging] = []
        self._allocated = 0
        self._lent = 0
        self.peak_lent = 0
        self.waits = 0
        self._closed = False
        self._cond = threading.Condition()

    @property
    def pinned(self) -> bool:
        if self._pinned is None:
            from ..torch.device import gpu_available

            self._pinned = gpu_available()
        return self._pinned

    @property
    def allocated_bytes(self) -> int:
        return self._allocated * self.size

    @contextmanager
    def acquire(self) -> Iterator[Staging]:
        """Lend a buffer for the ``with`` block (its content is whatever was left in it).

        Raises:
            GDSError: the pool was closed while waiting.
        """
        buf = self._take()
        try:
            yield buf
        finally:
            with self._cond:
                self._lent -= 1
                if not self._closed:
                    self._free.append(buf)
                self._cond.notify()

    def _take(self) -> Staging:
        with self._cond:
            waited = False
            while not self._closed and not self._free and self._allocated >= self.count:
                waited = True
                self._cond.wait(_POLL_S)
            if self._closed:
                raise GDSError("the staging pool is closed (the client was closed)")
            self.waits += waited
            self._lent += 1
            self.peak_lent = max(self.peak_lent, self._lent)
            if self._free:
                return self._free.pop()
            self._allocated += 1  # reserve the slot; allocate outside the lock
        try:
            return self._allocate()
        except BaseException:
            with self._cond:
                self._allocated -= 1
                self._lent -= 1
                self._cond.notify()
            raise

    def _allocate(self) -> Staging:
        import torch

        tensor = torch.empty(self.size, dtype=torch.uint8, pin_memory=self.pinned)
        return Staging(tensor.numpy().data, tensor, self.size)

    def close(self) -> None:
        """Drop the buffers (pinned memory goes back to PyTorch's host allocator) and wake
        waiting threads with an error; idempotent. Lent buffers are dropped when returned."""
        with self._cond:
            self._closed = True
            self._free.clear()
            self._cond.notify_all()

    def stats(self) -> dict[str, int | bool]:
        """``count``, ``size``, ``allocated`` buffers, ``lent`` now, ``peak_lent``, ``waits``."""
        with self._cond:
            return {"count": self.count, "size": self.size, "pinned": bool(self._pinned),
                    "allocated": self._allocated, "lent": self._lent, "peak_lent": self.peak_lent,
                    "waits": self.waits}


__all__ = ["Staging", "StagingPool"]
