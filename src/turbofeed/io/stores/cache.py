"""A size-bounded cache of whole remote objects on local disk, shared by the processes of a node.

Layout under ``root``::

    objects/<name>          published, immutable copies (the name hashes URL + ETag + size,
                            so a changed object gets a new name and never a mixed file)
    objects/<name>.lock     flock'd by the one process filling <name>; others wait
    tmp/<name>.<pid>.<tid>.part   a fill in progress, preallocated to its full size
    evict.lock              flock'd while a process makes room

Safety under concurrent writers: a fill writes a private ``.part`` file and publishes
it with one atomic ``rename``; readers only ever open published names, so nobody sees
half a file. The per-name lock stops two processes downloading the same object (if
the lock cannot be used, both download and the second rename replaces identical
bytes).

Objects in use are never evicted: :meth:`ShardCache.open` and :meth:`ShardCache.fill_open`
return a descriptor holding a shared ``flock`` on the file (taken before the rename
that publishes it, so there is no gap), and eviction unlinks only files it can lock
exclusively. A reader that needs the file by name (an indexer opening it several
times) holds such a descriptor meanwhile. A reader with a plain descriptor keeps
reading after an eviction (POSIX keeps the inode); one that finds the name gone falls
back to the network.

Size bound: published files plus ``.part`` reservations never exceed ``max_bytes``. A
fill larger than ``max_bytes`` is refused, and so is one that only evicting objects in
use would make room for (nothing is evicted then; the caller reads from the network).
Room is made and the ``.part`` file created at full size under ``evict.lock``, so two
processes never both count on the same free bytes; if ``evict.lock`` stays held for
10 s the fill is refused rather than made without it. A fill of unknown size
(:meth:`ShardCache.fill_stream`: a decompressed copy) grows its ``.part`` reservation in
steps, each made room for the same way, and stops with :class:`CacheFull` before a byte
would pass the bound. A ``.part`` whose filler died (its name lock is free: the kernel
drops a dead process's flock) is removed when a cache is opened and whenever room is
made; other leftovers after an hour. Index files are not counted.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable

from ..local.private import private_dirs
from .filelocks import GONE, FileLock, fcntl, lock_unused, pin, remove_file
from .fills import CacheFull, GrowingFill

__all__ = ["CacheFull", "ShardCache", "object_name", "remove_file"]

log = logging.getLogger("turbofeed")

_TOUCH_EVERY_S = 30.0       # LRU recency is refreshed at most this often per file
_STALE_PART_S = 3600.0      # a .part untouched this long belongs to a dead process
_POLL_S = 0.05
_GROW_STEP = 64 << 20       # a fill of unknown size reserves this much more at a time


def object_name(url: str, etag: str, size: int, suffix: str = "") -> str:
    """File name of one object version: readable tail + digest of (url, etag, size)."""
    digest = hashlib.sha1(f"{url}\0{etag}\0{size}".encode()).hexdigest()[:24]
    tail = "".join(c if c.isalnum() or c in "-_." else "_" for c in url.rsplit("/", 1)[-1])[-60:]
    return f"{digest}-{tail}{suffix}"


class ShardCache:
    """Whole-object cache of bounded size (see the module docstring for the guarantees).

    Invariant: bytes under ``objects/`` plus ``.part`` reservations <= ``max_bytes``;
    an object with an open descriptor from :meth:`open` or :meth:`fill_open` stays.

    Args:
        root: the cache folder (all processes of a node pass the same one).
        max_bytes: bound on published + in-progress bytes; default half of
            (free space + what the cache already holds).
        on_evict: called with the path of each file this process evicts (to drop
            descriptors kept open elsewhere, which would hold its disk space).
    """

    def __init__(self, root: str, max_bytes: int | None = None,
                 on_evict: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.objects = os.path.join(root, "objects")
        self.tmp = os.path.join(root, "tmp")
        private_dirs(self.objects)  # 0700: the node cache is the user's own
        private_dirs(self.tmp)
        if max_bytes is None:
            max_bytes = (shutil.disk_usage(root).free + self.used_bytes()) // 2
        self.max_bytes = int(max_bytes)
        self._on_evict = on_evict
        self._touched: dict[str, float] = {}
        self._lock = threading.Lock()
        self.evictions = 0
        self.remove_dead_parts()

    def remove_dead_parts(self) -> int:
        """Remove the ``.part`` files of fills whose process died (their name lock is
        free) or older than an hour; returns how many. Live fills hold their lock."""
        now, removed = time.time(), 0
        for path, _, mtime in self._entries(self.tmp):
            if (now - mtime > _STALE_PART_S or self._dead_part(path, None)) and remove_file(path):
                removed += 1
                log.info("turbofeed: removed %s, left by a process that died while filling it", path)
        return removed

    def path(self, name: str) -> str:
        return os.path.join(self.objects, name)

    def lookup(self, name: str) -> str | None:
        """The published file of ``name``, or None; marks it recently used. Not pinned:
        open the path at once and read through the descriptor, or use :meth:`open`."""
        path = self.path(name)
        if not os.path.exists(path):
            return None
        self.touch(name)
        return path

    def open(self, name: str) -> int | None:
        """A read-only descriptor of the published ``name`` that pins it: eviction leaves
        the file (and its name) alone until the descriptor is closed. None when absent
        or being evicted right now. Marks it recently used."""
        path = self.path(name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        if not pin(fd, path):
            os.close(fd)
            return None
        self.touch(name)
        return fd

    def touch(self, name: str) -> None:
        """Refresh ``name``'s recency (throttled: at most one ``utime`` per 30 s)."""
        now = time.monotonic()
        with self._lock:
            if now - self._touched.get(name, -1e9) < _TOUCH_EVERY_S:
                return
            self._touched[name] = now
        try:
            os.utime(self.path(name))
        except OSError:
            pass

    def fill(self, name: str, size: int, write: Callable[[int], None],
             stop: threading.Event | None = None) -> str | None:
        """Publish ``name`` (``size`` bytes written by ``write(fd)``) unless present.

        Returns the published path (not pinned: see :meth:`fill_open`), or None when
        there is no room for ``size`` bytes (nothing written). Raises as :meth:`fill_open`.
        """
        fd = self.fill_open(name, size, write, stop)
        if fd is None:
            return None
        os.close(fd)
        return self.path(name)

    def fill_open(self, name: str, size: int, write: Callable[[int], None],
                  stop: threading.Event | None = None) -> int | None:
        """Publish ``name`` unless present, like :meth:`fill`, and return a pinned
        descriptor of it (see :meth:`open`; the caller closes it), so nothing evicts
        the file between its publication and its use.

        Waits while another thread or process fills the same name. Returns None when
        ``size`` exceeds the bound or room cannot be made without evicting objects in
        use (nothing written).

        Raises:
            whatever ``write`` raises (the ``.part`` file is removed, nothing is published).
            InterruptedError: ``stop`` was set while waiting for another filler.
        """
        if size > self.max_bytes:
            return None
        lock = FileLock(self.path(name) + ".lock")
        while not lock.try_acquire():
            fd = self.open(name)
            if fd is not None:
                return fd
            if stop is not None and stop.is_set():
                raise InterruptedError(f"stopped while waiting for {name}")
            time.sleep(_POLL_S)
        try:
            found = self.open(name)
            if found is not None:
                return found
            part = os.path.join(self.tmp, f"{name}.{os.getpid()}.{threading.get_ident()}.part")
            fd = self._reserve(part, size, name)
            if fd is None:
                return None
            try:
                write(fd)
                # Data on disk before the name: after a power loss the rename could
                # otherwise survive with the blocks not, publishing a zero-filled shard.
                os.fsync(fd)
                if fcntl is not None:  # pinned before it has its name: no eviction gap
                    fcntl.flock(fd, fcntl.LOCK_SH)
                os.rename(part, self.path(name))  # atomic publish
            except BaseException:
                os.close(fd)
                remove_file(part)
                raise
            self.touch(name)
            return fd
        finally:
            lock.release()

    def fill_stream(self, name: str, copy: Callable[[GrowingFill], None], *, expected: int | None = None,
                    stop: threading.Event | None = None) -> int:
        """Publish ``name``, of a size known only once written (a decompressed copy),
        unless present, and return a pinned descriptor of it (as :meth:`fill_open`).

        ``copy(sink)`` writes the bytes with ``sink.write(data)``; the sink grows the
        ``.part`` reservation as it fills (``expected`` bytes at first, when given; else
        in steps of 64 MiB, or of what is written when the room left is smaller), and
        raises :class:`CacheFull` before the bytes written would pass ``max_bytes`` or
        when room cannot be made without evicting copies in use.

        Raises:
            CacheFull: as said (the ``.part`` file is removed, nothing is published).
            whatever ``copy`` raises; InterruptedError as :meth:`fill_open`.
        """
        if expected is not None and expected > self.max_bytes:
            raise CacheFull(name, expected, self.max_bytes, over_bound=True)
        first = expected or 0  # unknown: grown from nothing, so no room is asked for in vain

        def write(fd: int) -> None:
            sink = GrowingFill(self, name, fd, first)
            copy(sink)
            os.ftruncate(fd, sink.n)  # give back what was reserved but not written

        fd = self.fill_open(name, first, write, stop)
        if fd is None:  # the first reservation found no room
            raise CacheFull(name, first, self.max_bytes, over_bound=False)
        return fd

    def grow(self, sink: GrowingFill, end: int) -> None:
        """Reserve room for ``end`` bytes of ``sink``'s ``.part`` (a step more when the
        bound allows), or raise :class:`CacheFull`."""
        if end > self.max_bytes:
            raise CacheFull(sink.name, end, self.max_bytes, over_bound=True)
        lock = self._evict_lock()
        if lock is None:
            raise CacheFull(sink.name, end, self.max_bytes, over_bound=False)
        try:
            for size in dict.fromkeys((min(self.max_bytes, max(end, sink.reserved + _GROW_STEP)), end)):
                if self._make_room_locked(size - sink.reserved):  # the .part counts as reserved so far
                    os.ftruncate(sink.fd, size)
                    sink.reserved = size
                    return
            raise CacheFull(sink.name, end, self.max_bytes, over_bound=False)
        finally:
            lock.release()

    def used_bytes(self) -> int:
        return sum(size for _, size, _ in self._entries()) + sum(
            size for _, size, _ in self._entries(self.tmp))

    def _entries(self, folder: str | None = None) -> list[tuple[str, int, float]]:
        """(path, size, mtime) of cached objects (or of ``.part`` files in ``folder``)."""
        out: list[tuple[str, int, float]] = []
        try:
            scan = list(os.scandir(folder or self.objects))
        except FileNotFoundError:
            return out
        for entry in scan:
            if entry.name.endswith(".lock"):
                continue
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            out.append((entry.path, st.st_size, st.st_mtime))
        return out

    def _reserve(self, part: str, size: int, name: str) -> int | None:
        """Make room and create ``part`` at its full size, under the eviction lock, so two
        processes cannot both see the same free room; returns its open descriptor, or
        None when there is no room. The caller holds ``name``'s lock."""
        lock = self._evict_lock()
        if lock is None:
            return None
        try:
            if not self._make_room_locked(size, filling=name):
                return None
            fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, size)  # sparse, but its size counts for everyone from now on
            except BaseException:
                os.close(fd)
                remove_file(part)
                raise
            return fd
        finally:
            lock.release()

    def _evict_lock(self) -> FileLock | None:
        """The node's eviction lock, or None after 10 s (the caller then does without
        the room rather than risk two processes counting on the same bytes)."""
        lock = FileLock(os.path.join(self.root, "evict.lock"))
        deadline = time.monotonic() + 10.0
        while not lock.try_acquire():  # another process is evicting; it is quick
            if time.monotonic() > deadline:
                log.warning("turbofeed: %s held for 10 s; not caching meanwhile", lock.path)
                return None
            time.sleep(_POLL_S)
        return lock

    def make_room(self, incoming: int) -> bool:
        """Unlink least-recently-used objects not in use until ``incoming`` more bytes
        fit; False (nothing evicted) when they cannot."""
        lock = self._evict_lock()
        if lock is None:
            return False
        try:
            return self._make_room_locked(incoming)
        finally:
            lock.release()

    def _make_room_locked(self, incoming: int, filling: str | None = None) -> bool:
        now = time.time()
        parts = 0
        for path, size, mtime in self._entries(self.tmp):
            if now - mtime > _STALE_PART_S or self._dead_part(path, filling):
                remove_file(path)
            else:
                parts += size
        objects = sorted(self._entries(), key=lambda e: e[2])
        used = parts + sum(size for _, size, _ in objects)
        victims: list[tuple[str, int, int]] = []  # held exclusively: no reader can pin them now
        try:
            for path, size, _ in objects:
                if used + incoming <= self.max_bytes:
                    break
                fd = lock_unused(path)
                if fd == GONE:
                    used -= size
                elif fd is not None:
                    victims.append((path, size, fd))
                    used -= size
            if used + incoming > self.max_bytes:
                return False  # only objects in use stand in the way: evict none
            for path, size, _ in victims:
                if remove_file(path):
                    self.evictions += 1
                    log.debug("turbofeed: cache evicted %s (%d bytes)", path, size)
                    if self._on_evict is not None:
                        self._on_evict(path)
            return True
        finally:
            for _, _, fd in victims:
                os.close(fd)

    def _dead_part(self, path: str, filling: str | None) -> bool:
        """A ``<name>.<pid>.<tid>.part`` nobody fills: its name lock is free (the filler
        died: the kernel dropped its flock) or held by us, filling ``name`` afresh."""
        base = os.path.basename(path)
        if not base.endswith(".part") or fcntl is None:
            return False
        name = base.rsplit(".", 3)[0]
        if name == filling:
            return True
        lock = FileLock(self.path(name) + ".lock")
        if not os.path.exists(lock.path) or not lock.try_acquire():
            return False
        lock.release()
        return True
