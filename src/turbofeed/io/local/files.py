"""Shard files kept open for reads: positional reads checked against the file's identity,
and (opt-in) zero-copy views of mapped files.

Datasets can have thousands of shards; keeping every one open or mapped would hit the
process's file and mapping limits, and reopening on every read costs a syscall pair on
network file systems. So both are bounded LRU caches; an entry evicted while a reader
still uses it stays valid until that reader lets go (reference counting closes it).

Why identity, not the path: a shard republished by rename is a new file at the same
path, and one rewritten in place keeps its inode. Entries are keyed by :class:`FileRef`
(path + device, inode, size, mtime_ns, ctime_ns as indexed) and a file opened for a ref
must still have that identity, so a reader never gets another file's bytes through an
index built for the old one. A change *during* a pass is caught too: after each
``pread`` of a :class:`FileRef`, one ``fstat`` of the open descriptor must still show the
indexed identity. Any change to the file after it was indexed (a write, a truncation, a
``chmod``, a rename over it or its deletion, which unlink the old inode) sets its ctime,
which no tool can set back, so bytes read before an unchanged ``fstat`` are the indexed
bytes. Every such failure is a :class:`~turbofeed.errors.StorageError` naming the file:
not bad data, raised whatever ``on_error`` says.

Why views are opt-in (``TURBOFEED_MMAP=1``): a view of the mapped file saves a copy and
two GIL hand-overs per sample (about 2% more images/s on the training pipeline,
bench/RESULTS.md), but a file truncated *while mapped* raises SIGBUS when the lost pages
are touched, and that kills the process; a view also cannot be checked after the
decoder read it. Plain ``pread`` (the default) turns every such change into a
:class:`~turbofeed.errors.StorageError`. Turn views on only where nothing rewrites shards
under a running job (turbofeed's own writers and the S3 node cache publish by rename).
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from typing import NamedTuple

from ...errors import StorageError


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


class FileRef:
    """A file as it was when indexed: ``path`` and its :class:`FileId`. Hashable by a
    string built once (a str caches its hash; this is looked up once per sample)."""

    __slots__ = ("path", "id", "key", "stamp")

    def __init__(self, path: str, identity: FileId) -> None:
        self.path = path
        self.id = identity
        # what an open descriptor's fstat must still show after each read (its device and
        # inode cannot change): compared as one tuple, cheaper than building a FileId
        self.stamp = (identity.size, identity.mtime_ns, identity.ctime_ns)
        self.key = f"{path}\0{identity.dev}:{identity.ino}:{identity.size}:{identity.mtime_ns}:{identity.ctime_ns}"

    def changed(self) -> bool:
        """True when the file at ``path`` is gone or is not this version any more."""
        try:
            return file_id(self.path) != self.id
        except OSError:
            return True

    def __repr__(self) -> str:
        return f"FileRef({self.path!r}, {self.id})"


class OpenFile:
    """One file descriptor, closed when the last reference goes."""

    __slots__ = ("fd",)

    def __init__(self, ref: FileRef | str) -> None:
        if isinstance(ref, str):  # published once and never changed (the S3 node cache)
            self.fd = os.open(ref, os.O_RDONLY)
            return
        try:
            fd = os.open(ref.path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise StorageError(ref.path, what_changed(ref)) from exc
        except OSError as exc:
            raise StorageError(ref.path, f"cannot open it: {exc}") from exc
        if FileId.of(os.fstat(fd)) != ref.id:
            os.close(fd)  # self.fd stays unset: __del__ closes nothing
            raise StorageError(ref.path, what_changed(ref))
        self.fd = fd

    def __del__(self) -> None:
        fd = getattr(self, "fd", None)  # unset when os.open failed
        if fd is not None:
            os.close(fd)


def what_changed(ref: FileRef) -> str:
    """Why the file at ``ref.path`` is not the indexed version: the reason of a
    :class:`StorageError` (on the error path only: one ``stat`` of the path)."""
    try:
        st = os.stat(ref.path)
    except OSError:
        what = "vanished (deleted or renamed away)"
    else:
        if (st.st_dev, st.st_ino) != (ref.id.dev, ref.id.ino):
            what = "replaced (another file at its path)"
        elif st.st_size < ref.id.size:
            what = f"truncated from {ref.id.size} to {st.st_size} bytes"
        else:
            what = "rewritten in place (or its mode or links changed)"
    return f"{what} since it was indexed; a new pass indexes it again"


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
        self._files: OrderedDict[str, OpenFile] = OrderedDict()
        self._maps: OrderedDict[str, memoryview] = OrderedDict()
        self._lock = threading.Lock()

    def _open(self, ref: FileRef | str) -> OpenFile:
        key = ref if isinstance(ref, str) else ref.key
        with self._lock:
            file = self._files.get(key)
            if file is None:
                file = self._files[key] = OpenFile(ref)
                while len(self._files) > self._max_open:
                    self._files.popitem(last=False)
            else:
                self._files.move_to_end(key)
        return file

    def pread(self, ref: FileRef | str, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset`` of the file (fewer at its end), unchecked: for
        files never changed in place (``ref`` a path) or reads checked by the caller.

        Raises:
            StorageError: ``ref`` is a :class:`FileRef` whose file is gone or not the
                indexed version any more.
        """
        return os.pread(self._open(ref).fd, size, offset)

    def pread_exact(self, ref: FileRef, size: int, offset: int) -> bytes:
        """Exactly ``size`` bytes at ``offset`` (a sample whose place an index recorded),
        read from the indexed version of the file (checked after the read).

        Raises:
            StorageError: the file vanished or changed since it was indexed (before or
                during this read), or the read failed.
        """
        file = self._open(ref)
        try:
            data = os.pread(file.fd, size, offset)
            st = os.fstat(file.fd)
            same = (st.st_size, st.st_mtime_ns, st.st_ctime_ns) == ref.stamp
        except OSError as exc:
            raise StorageError(ref.path, f"read of {size} bytes at offset {offset} failed: {exc}") from exc
        if not same:
            raise StorageError(ref.path, what_changed(ref))
        if len(data) != size:  # the same file cannot have shrunk: a lying file system
            raise StorageError(ref.path, f"short read: {len(data)} of {size} bytes at offset {offset}")
        return data

    def view(self, ref: FileRef | str, size: int, offset: int) -> memoryview:
        """A zero-copy view of ``size`` bytes at ``offset`` of the file's mapping.

        Raises:
            StorageError: ``ref``'s file is gone or not the indexed version any more, or
                the range lies past the end of the file.
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
            raise StorageError(ref if isinstance(ref, str) else ref.path,
                               f"bytes {offset}..{offset + size} are past the end of the {len(whole)}-byte "
                               "file (changed since it was indexed?)")
        return whole[offset:offset + size]

    @staticmethod
    def _map(ref: FileRef | str) -> memoryview:
        file = OpenFile(ref)
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
    """True when ``TURBOFEED_MMAP=1``: the native decoder reads mapped shards instead of
    ``pread`` copies (see the module docstring for the SIGBUS hazard)."""
    return os.environ.get("TURBOFEED_MMAP", "0") == "1"


FILES = ShardFiles()
