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
own writers and the S3 node cache publish by rename), loaders check every shard's
identity when an epoch starts (a changed shard is re-indexed and its old map dropped
before any read), and ``TURBOFEED_MMAP=0`` turns views off for file systems where others
might truncate shards in the middle of an epoch.

Why identity, not the path: a shard republished by rename is a new file at the same
path, and one rewritten in place keeps its inode. Entries are keyed by :class:`FileRef`
(path + device, inode, size, mtime_ns, ctime_ns as indexed) and a file opened for a ref
must still have that identity, so a reader never gets another file's bytes through an
index built for the old one.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from typing import NamedTuple


class FileId(NamedTuple):
    """What tells two versions of a file apart: a rename gives a new inode, a rewrite in
    place a new ctime (which no tool can set back, unlike the mtime)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> "FileId":
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def as_dict(self) -> dict[str, int]:
        return self._asdict()


def file_id(path: str) -> FileId:
    """The identity of ``path`` now (raises OSError when it is gone)."""
    return FileId.of(os.stat(path))


def indexed_file(path: str) -> FileRef | None:
    """``path`` as it is now, taken by a source before it reads the file, so that a change
    made while it reads shows later (:meth:`turbofeed.io.Source.changed`). None when it
    cannot be stat'ed: opening it then says why."""
    try:
        return FileRef(path, file_id(path))
    except OSError:
        return None


class FileChanged(OSError):
    """A file is no longer the one that was indexed (replaced, rewritten or truncated)."""


class FileRef:
    """A file as it was when indexed: ``path`` and its :class:`FileId`. Hashable by a
    string built once (a str caches its hash; this is looked up once per sample)."""

    __slots__ = ("path", "id", "key")

    def __init__(self, path: str, identity: FileId) -> None:
        self.path = path
        self.id = identity
        self.key = f"{path}\0{identity.dev}:{identity.ino}:{identity.size}:{identity.mtime_ns}:{identity.ctime_ns}"

    def changed(self) -> bool:
        """True when the file at ``path`` is gone or is not this version any more."""
        try:
            return file_id(self.path) != self.id
        except OSError:
            return True

    def __repr__(self) -> str:
        return f"FileRef({self.path!r}, {self.id})"


class _OpenFile:
    """One file descriptor, closed when the last reference goes."""

    __slots__ = ("fd",)

    def __init__(self, ref: FileRef | str) -> None:
        path = ref if isinstance(ref, str) else ref.path
        fd = os.open(path, os.O_RDONLY)
        if not isinstance(ref, str) and FileId.of(os.fstat(fd)) != ref.id:
            os.close(fd)  # self.fd stays unset: __del__ closes nothing
            raise FileChanged(f"{path} changed on disk since it was indexed (replaced, rewritten "
                              "or truncated); it is re-indexed when the next epoch starts")
        self.fd = fd

    def __del__(self) -> None:
        fd = getattr(self, "fd", None)  # unset when os.open failed
        if fd is not None:
            os.close(fd)


class ShardFiles:
    """Open files and read-only maps of shards, at most ``max_open`` of each (each map
    holds a descriptor too: at most ``2 * max_open`` open files).

    Files are named by a :class:`FileRef` (checked against the file when opened) or, for
    files that are never changed in place once published (the S3 node cache), a path.

    A read is one ``pread``: no dup or close per sample, since every syscall also hands
    the GIL to another thread and waits to get it back.
    """

    def __init__(self, max_open: int = 128) -> None:
        self._max_open = max_open
        self._files: OrderedDict[str, _OpenFile] = OrderedDict()
        self._maps: OrderedDict[str, memoryview] = OrderedDict()
        self._lock = threading.Lock()

    def pread(self, ref: FileRef | str, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset`` of the file (fewer at its end).

        Raises:
            FileChanged: ``ref``'s file is not the indexed version any more.
        """
        key = ref if isinstance(ref, str) else ref.key
        with self._lock:
            file = self._files.get(key)
            if file is None:
                file = self._files[key] = _OpenFile(ref)
                while len(self._files) > self._max_open:
                    self._files.popitem(last=False)
            else:
                self._files.move_to_end(key)
        return os.pread(file.fd, size, offset)

    def pread_exact(self, ref: FileRef | str, size: int, offset: int) -> bytes:
        """Exactly ``size`` bytes at ``offset`` (a sample whose place an index recorded).

        Raises:
            FileChanged: as :meth:`pread`.
            OSError: fewer bytes are there (the file changed since indexing).
        """
        data = self.pread(ref, size, offset)
        if len(data) != size:
            raise OSError(f"short read: {len(data)} of {size} bytes at offset "
                          f"{offset} (file changed since indexing?)")
        return data

    def view(self, ref: FileRef | str, size: int, offset: int) -> memoryview:
        """A zero-copy view of ``size`` bytes at ``offset`` of the file's mapping.

        Raises:
            FileChanged: ``ref``'s file is not the indexed version any more.
            OSError: the range lies past the end of the file (it changed since indexing).
        """
        key = ref if isinstance(ref, str) else ref.key
        with self._lock:
            whole = self._maps.get(key)
            if whole is None:
                whole = self._maps[key] = self._map(ref)
                while len(self._maps) > self._max_open:
                    self._maps.popitem(last=False)  # unmapped once no view of it is left
            else:
                self._maps.move_to_end(key)
        if offset + size > len(whole):
            raise OSError(f"bytes {offset}..{offset + size} are past the end of the {len(whole)}-byte file "
                          "(changed since indexing?)")
        return whole[offset:offset + size]

    @staticmethod
    def _map(ref: FileRef | str) -> memoryview:
        file = _OpenFile(ref)
        if os.fstat(file.fd).st_size == 0:  # mmap refuses empty files
            return memoryview(b"")
        # CPython's mmap keeps its own dup of the descriptor, so a map is an open file too
        return memoryview(mmap.mmap(file.fd, 0, access=mmap.ACCESS_READ))

    def close(self, ref: FileRef | str | None = None) -> None:
        """Forget the file (every file without one); a read or view in use stays valid."""
        with self._lock:
            if ref is None:
                self._files.clear()
                self._maps.clear()
            else:
                key = ref if isinstance(ref, str) else ref.key
                self._files.pop(key, None)
                self._maps.pop(key, None)


def views_enabled() -> bool:
    """False when ``TURBOFEED_MMAP=0``: reads copy with ``pread`` instead of mapping."""
    return os.environ.get("TURBOFEED_MMAP", "1") != "0"


FILES = ShardFiles()
