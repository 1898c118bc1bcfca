"""A sequence of sample ids computed lazily, a chunk at a time, a few chunks cached.

The lazy epochs of :mod:`turbofeed.plan.resampled` (blocks) and
:mod:`turbofeed.plan.stream_rounds` (rounds) share it: position ``p`` is in chunk
``p // chunk_len``, a chunk is a pure function of the plan's inputs and its number, computed
when first read and forgotten when ``cached`` newer ones are kept::

    positions  0 .. L-1 | L .. 2L-1 | 2L .. 3L-1 | ...
    chunk      0        | 1         | 2          | ...    computed on demand, LRU of ``cached``
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


class LazyChunks(Generic[T]):
    """``size`` positions in chunks of ``chunk_len``; subclasses say how to compute chunk ``c``
    (:meth:`_compute`) and where its ids are (:meth:`_ids`), and read one position with
    :meth:`chunk` in their ``__getitem__`` (the per-sample path, written out for speed).

    Args:
        size: positions in all.
        chunk_len: positions per chunk (the last chunk may hold fewer real ones).
        cached: chunks kept, least recently read dropped first.
        empty: a chunk for the "nothing read yet" fast-path entry (never returned).

    Thread-safe: chunks are cached under a lock; a chunk computed twice (two threads at
    once) is the same chunk, as it is a pure function of its number. Holds at most
    ``cached`` chunks plus the one read last.
    """

    def __init__(self, size: int, chunk_len: int, cached: int, empty: T) -> None:
        self.size, self.chunk_len = int(size), int(chunk_len)
        self._cached = cached
        self._chunks: OrderedDict[int, T] = OrderedDict()
        self._lock = threading.Lock()
        self._last: tuple[int, T] = (-1, empty)  # the chunk read last

    def __len__(self) -> int:
        return self.size

    def _compute(self, c: int) -> T:
        """Chunk ``c``, computed now (pure: the same ``c`` gives the same chunk)."""
        raise NotImplementedError

    def _ids(self, chunk: T) -> np.ndarray:
        """The int64 sample ids of ``chunk``, one per position."""
        raise NotImplementedError

    def __getitem__(self, position: int) -> int:
        """The sample id at ``position`` (subclasses: ``chunk(c)`` and an index, inline)."""
        raise NotImplementedError

    def chunk(self, c: int) -> T:
        """Chunk ``c``, from the cache or computed now."""
        last = self._last  # one tuple, replaced whole: read without the lock (per-sample path)
        if last[0] == c:
            return last[1]
        with self._lock:
            found = self._chunks.get(c)
            if found is not None:
                self._chunks.move_to_end(c)
        if found is None:
            found = self._compute(c)  # outside the lock: other threads read cached chunks meanwhile
            with self._lock:
                self._chunks[c] = found
                while len(self._chunks) > self._cached:
                    self._chunks.popitem(last=False)
        self._last = (c, found)
        return found

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The sample ids at ``positions`` (int64 array, each in ``0 .. size-1``)."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(positions.shape, np.int64)
        chunks = positions // self.chunk_len
        for c in np.unique(chunks).tolist():
            where = chunks == c
            out[where] = self._ids(self.chunk(c))[positions[where] - c * self.chunk_len]
        return out
