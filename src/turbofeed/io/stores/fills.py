"""What a fill of unknown size writes into (:meth:`turbofeed.io.stores.cache.ShardCache.fill_stream`),
and the error of a copy the cache cannot hold."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cache import ShardCache

__all__ = ["CacheFull", "GrowingFill"]


class CacheFull(Exception):
    """A fill cannot be held by the cache: ``needed`` bytes are over its ``bound``
    (``over_bound``), or the room is held by copies in use. Nothing of it stays on disk.

    Not an ``OSError``: the decompressors' callers treat an errno-less ``OSError`` as bad
    data (:func:`turbofeed.io.local.compressed.decompress`)."""

    def __init__(self, name: str, needed: int, bound: int, over_bound: bool) -> None:
        super().__init__(name, needed, bound, over_bound)
        self.name, self.needed, self.bound, self.over_bound = name, needed, bound, over_bound

    def __str__(self) -> str:
        if self.over_bound:
            return f"{self.name}: over {self.bound} bytes, the cache's bound"
        return (f"{self.name}: no room for {self.needed} bytes in the cache (bound {self.bound} bytes, "
                "the rest held by copies in use)")


class GrowingFill:
    """The sink of :meth:`ShardCache.fill_stream`: appends to the ``.part`` open as
    ``fd``, keeping ``n`` (bytes written) <= ``reserved`` (its size) <= the bound."""

    def __init__(self, cache: ShardCache, name: str, fd: int, reserved: int) -> None:
        self.cache, self.name, self.fd = cache, name, fd
        self.reserved = reserved
        self.n = 0

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        if self.n + size > self.reserved:
            self.cache.grow(self, self.n + size)  # raises before a byte past the bound is written
        while view:
            k = os.pwrite(self.fd, view, self.n)
            self.n += k
            view = view[k:]
        return size

    def tell(self) -> int:
        return self.n
