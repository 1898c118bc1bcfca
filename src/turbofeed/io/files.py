"""Shard files kept open for reads: positional reads, and zero-copy views of mapped files.

Datasets can have thousands of shards; keeping every one open or mapped would hit the
process's file and mapping limits, and reopening on every read costs a syscall pair on
network file systems. So both are bounded LRU caches; an entry evicted while a reader
still uses it stays valid until that reader lets go (reference counting closes it).

Why views: a ``pread`` copies each sample out of the page cache and hands the GIL over
twice per sample; a view of the mapped file costs neither, and the native decoder reads
the pages with the GIL released (2.4% more images/s on the training pipeline,
bench/RESULTS.md). Mapped files have one hazard: a file truncated *while mapped* raises
SIGBUS when the lost pages are touched. Shards are not rewritten in place (turbofeed's
own writers and the S3 node cache publish by rename), but ``TURBOFEED_MMAP=0`` turns
views off for file systems where others might.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict


class _OpenFile:
    """One file descriptor, closed when the last reference goes."""

    __slots__ = ("fd",)

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self) -> None:
        fd = getattr(self, "fd", None)  # unset when os.open failed
        if fd is not None:
            os.close(fd)


class ShardFiles:
    """Open files and read-only maps of shards, at most ``max_open`` of each (each map
    holds a descriptor too: at most ``2 * max_open`` open files).

    A read is one ``pread``: no dup or close per sample, since every syscall also hands
    the GIL to another thread and waits to get it back.
    """

    def __init__(self, max_open: int = 128) -> None:
        self._max_open = max_open
        self._files: OrderedDict[str, _OpenFile] = OrderedDict()
        self._maps: OrderedDict[str, memoryview] = OrderedDict()
        self._lock = threading.Lock()

    def pread(self, path: str, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset`` of ``path`` (fewer at the end of the file)."""
        with self._lock:
            file = self._files.get(path)
            if file is None:
                file = self._files[path] = _OpenFile(path)
                while len(self._files) > self._max_open:
                    self._files.popitem(last=False)
            else:
                self._files.move_to_end(path)
        return os.pread(file.fd, size, offset)

    def view(self, path: str, size: int, offset: int) -> memoryview:
        """A zero-copy view of ``size`` bytes at ``offset`` of ``path``'s mapping.

        Raises:
            OSError: the range lies past the end of the file (it changed since indexing).
        """
        with self._lock:
            whole = self._maps.get(path)
            if whole is None:
                whole = self._maps[path] = self._map(path)
                while len(self._maps) > self._max_open:
                    self._maps.popitem(last=False)  # unmapped once no view of it is left
            else:
                self._maps.move_to_end(path)
        if offset + size > len(whole):
            raise OSError(f"bytes {offset}..{offset + size} are past the end of the {len(whole)}-byte file "
                          "(changed since indexing?)")
        return whole[offset:offset + size]

    @staticmethod
    def _map(path: str) -> memoryview:
        file = _OpenFile(path)
        if os.fstat(file.fd).st_size == 0:  # mmap refuses empty files
            return memoryview(b"")
        # CPython's mmap keeps its own dup of the descriptor, so a map is an open file too
        return memoryview(mmap.mmap(file.fd, 0, access=mmap.ACCESS_READ))

    def close(self, path: str | None = None) -> None:
        """Forget ``path`` (every file without one); a read or view in use stays valid."""
        with self._lock:
            if path is None:
                self._files.clear()
                self._maps.clear()
            else:
                self._files.pop(path, None)
                self._maps.pop(path, None)


def views_enabled() -> bool:
    """False when ``TURBOFEED_MMAP=0``: reads copy with ``pread`` instead of mapping."""
    return os.environ.get("TURBOFEED_MMAP", "1") != "0"


FILES = ShardFiles()
