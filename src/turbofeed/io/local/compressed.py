"""Compressed tar shards (``.tar.gz``, ``.tgz``, ``.tar.bz2``, ``.tar.xz``), local or
``s3://``: read from a decompressed plain copy in the node cache.

Why a plain copy: samples are read in a shuffled order, and a gzip stream has no random
access (reaching a member means inflating everything before it). One sequential pass per
shard version writes a plain tar that the index and the reads then use.

Why in the node cache (:class:`turbofeed.io.stores.cache.ShardCache`, ``$TURBOFEED_CACHE_DIR/s3``):
a few hundred KB of gzip can hold hundreds of GB of zeros. Every decompressed copy, of a
local shard as of an ``s3://`` one, counts against the one bound of that cache
(``TURBOFEED_S3_CACHE_SIZE`` or ``S3Config(cache_max_bytes=...)``), and copies not in use
are evicted, least recently used first, to make room. The decompression writes through
a running byte count (:meth:`ShardCache.fill_stream`) and stops before the copy would pass
the bound: a :class:`~turbofeed.errors.StorageError` names the shard, says the copy is over
the bound and how to raise it; nothing past the bound is ever written. A fill's ``.part``
file left by a killed process is removed when the next process opens the cache (its
flock died with it).

A copy is named by the compressed file's identity (local: path + device, inode, size,
mtime, ctime; ``s3://``: URL + ETag + size), so a changed shard gets a new copy.
"""

from __future__ import annotations

import bz2
import contextlib
import functools
import gzip
import io
import logging
import lzma
import os
import shutil
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO, Protocol

from ...errors import DatasetError, StorageError
from ..stores.cache import CacheFull, ShardCache, object_name
from ..stores.config import CACHE_SIZE_ENV, S3Config, cache_limit, default_config
from ..stores.fills import GrowingFill
from .files import FILES, FileId
from .index import cached_index, index_shard

log = logging.getLogger("turbofeed")

# name -> (magic bytes, opener); zstd is recognised only to be named in the error
_CODECS: dict[str, tuple[bytes, Callable[..., io.BufferedIOBase]]] = {
    "gzip": (b"\x1f\x8b", gzip.open),
    "bzip2": (b"BZh", bz2.open),
    "xz": (b"\xfd7zXZ\x00", lzma.open),
}
_ZSTD = b"\x28\xb5\x2f\xfd"


class Writable(Protocol):
    def write(self, data: bytes, /) -> object: ...


def compression_of(path: str) -> str | None:
    """``"gzip"``, ``"bzip2"`` or ``"xz"`` when ``path`` starts with that format's magic
    bytes, None for anything else (a plain tar, or not a tar at all).

    Raises:
        DatasetError: a zstd-compressed file (no zstd in Python's standard library).
    """
    with open(path, "rb") as f:
        return codec_of(f.read(6), path)


def codec_of(head: bytes, what: str) -> str | None:
    """:func:`compression_of` a file that starts with ``head`` (6 bytes or more; ``what``
    names it in the error)."""
    if head.startswith(_ZSTD):
        raise DatasetError(f"{what}: zstd-compressed; turbofeed reads plain, gzip, bzip2 and xz "
                           "tar shards (decompress it once with `zstd -d`)")
    return next((name for name, (magic, _) in _CODECS.items() if head.startswith(magic)), None)


def decompress(src: BinaryIO, out: Writable, what: str) -> str:
    """Write the decompressed bytes of the compressed tar ``src`` (a binary file at offset
    0) into ``out`` (anything with ``write``); returns the codec. ``what`` names the
    shard in errors. Shared with the ``s3://`` shards (:mod:`turbofeed.io.stores.compressed`).

    Raises:
        DatasetError: not gzip, bzip2 or xz, or the stream is corrupt or cut short.
        OSError: writing ``out`` failed (errno set: a full or read-only disk).
    """
    codec = codec_of(src.read(6), what)
    if codec is None:
        raise DatasetError(f"{what}: not a compressed tar")
    src.seek(0)
    try:
        with _CODECS[codec][1](src, "rb") as stream:
            shutil.copyfileobj(stream, out, 1 << 20)
    except (EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
        # the codecs report bad data as EOFError, zlib.error, LZMAError or an OSError
        # without errno; an OSError with one is the output's disk (full, read-only)
        if isinstance(exc, OSError) and exc.errno is not None:
            raise
        raise DatasetError(f"{what}: corrupt or truncated {codec} stream ({exc})") from exc
    return codec


def node_cache(cache_dir: str, config: S3Config | None = None) -> ShardCache:
    """The node cache under ``cache_dir`` (``cache_dir/s3``), bounded as ``config`` (default:
    the process's :class:`~turbofeed.io.S3Config`) says (see
    :func:`turbofeed.io.stores.config.cache_limit`); one object per process and bound: opening
    it removes the fills of dead processes, once.

    Raises:
        turbofeed.units.SizeError: ``TURBOFEED_S3_CACHE_SIZE`` holds no size.
    """
    return _node_cache(os.path.abspath(cache_dir), cache_limit(config or default_config()))


@functools.lru_cache(maxsize=16)
def _node_cache(cache_dir: str, bound: int | None) -> ShardCache:
    # earlier versions kept unbounded plain copies under tar-plain/: the cache holds them now
    shutil.rmtree(os.path.join(cache_dir, "tar-plain"), ignore_errors=True)
    # a descriptor of this process on an evicted file would hold its disk space
    return ShardCache(os.path.join(cache_dir, "s3"), bound, on_evict=FILES.close)


def bound_hint() -> str:
    """How to raise the node cache's bound (the end of every "does not fit" message)."""
    return (f"raise the bound with {CACHE_SIZE_ENV}=SIZE (e.g. 500G) or S3Config(cache_max_bytes=...), "
            "or store the shard as a plain .tar")


class PlainCopy:
    """The decompressed copy of one version of a compressed shard in the node cache,
    made when first needed and again whenever it was evicted.

    Between reads it holds a pinned descriptor (:meth:`ShardCache.open`: no eviction
    removes the file meanwhile), so a read is one ``pread``. The pin goes with
    :meth:`release` (the source is closed, or a streamed pass read its last sample) or
    when this process needs room for another copy: every copy of the process not being
    read at that moment lets go (:func:`release_idle`), and may be evicted.

    Invariant: the descriptor is closed only with no ``pread`` in progress on it.

    Args:
        cache: the node cache.
        name: the copy's name there (see :func:`turbofeed.io.stores.cache.object_name`).
        what: the shard (path or URL), for messages.
        open_compressed: a context manager of the compressed shard as a binary file at
            offset 0, the version indexed (else it raises :class:`StorageError`).
        size: the copy's size when known (from the index): the first reservation, and
            a copy decompressing to another size is refused.
        packed: the compressed shard's size (for messages).
    """

    def __init__(self, cache: ShardCache, name: str, what: str,
                 open_compressed: Callable[[], contextlib.AbstractContextManager[BinaryIO]],
                 size: int | None = None, packed: int | None = None) -> None:
        self.cache, self.name, self.what, self.size, self.packed = cache, name, what, size, packed
        self._open_compressed = open_compressed
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._readers = 0
        self._release = False  # close the descriptor when the last reader is done
        self.made = 0          # copies this object decompressed (the first, and evicted ones made again)
        self._filling = False  # a decompression into the cache is in progress
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._finalizer = weakref.finalize(self, _close_fd, [None])

    @property
    def path(self) -> str:
        return self.cache.path(self.name)

    def pread(self, offset: int, size: int, wait_s: float = 0.0, stop: threading.Event | None = None) -> bytes:
        """``size`` bytes at ``offset`` of the copy (made first if it is not in the cache;
        ``wait_s``, ``stop``: as :meth:`hold`, for that).

        Raises:
            StorageError: the copy does not fit in the node cache (names the bound and how
                to raise it), the shard is not the version indexed any more, or a read
                of the copy failed. DatasetError: its compressed stream is corrupt.
        """
        fd = self._acquire(wait_s, stop)
        try:
            data = os.pread(fd, size, offset)
        except OSError as exc:
            raise StorageError(self.what, f"read of its plain copy {self.path} failed: {exc}") from exc
        finally:
            self._done()
        if len(data) != size:
            raise StorageError(self.what, f"short read of its plain copy at {offset} ({len(data)} of {size} bytes)")
        return data

    @contextlib.contextmanager
    def pinned(self) -> Iterator[str]:
        """The copy's path, made if needed, pinned while the block runs (to index it),
        then let go: nothing reads it until the pass does, and the other processes of
        the node may need the room meanwhile (they index their copies at the same time).
        Making it waits up to :data:`INDEX_WAIT_S` for room their indexing holds."""
        self._acquire(INDEX_WAIT_S)
        try:
            yield self.path
        finally:
            self._done()
            self.release()

    def hold(self, wait_s: float = 0.0, stop: threading.Event | None = None) -> None:
        """Make the copy now if it is not in the cache, and keep it pinned (streaming
        mode: ahead of its block). When other processes' copies hold the room, wait up
        to ``wait_s`` seconds for them to let go (streamed ranks of a node do, after
        their block), or until ``stop`` is set. Raises as :meth:`pread`."""
        self._acquire(wait_s, stop)
        self._done()

    def release(self) -> None:
        """Unpin the copy (now, or when the reads in progress end): the cache may evict it."""
        with self._lock:
            if self._readers:
                self._release = True
                return
            self._close_locked()

    def _acquire(self, wait_s: float = 0.0, stop: threading.Event | None = None) -> int:
        with self._lock:
            if self._fd is None:
                fd = self.cache.open(self.name)
                self._fd = fd if fd is not None else self._make(wait_s, stop)
                self._finalizer.detach()
                self._finalizer = weakref.finalize(self, _close_fd, [self._fd])
            self._readers += 1
            self._release = False
            return self._fd

    def _done(self) -> None:
        with self._lock:
            self._readers -= 1
            if self._readers == 0 and self._release:
                self._close_locked()

    def _close_locked(self) -> None:
        self._release = False
        if self._fd is not None:
            self._finalizer.detach()
            os.close(self._fd)  # unpins
            self._fd = None

    def _try_release_idle(self) -> bool:
        """Unpin if no read is in progress (never waits: the caller may hold another
        copy's lock); True when it let go of a pin."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._readers or self._fd is None:
                return False
            self._close_locked()
            return True
        finally:
            self._lock.release()

    def _make(self, wait_s: float, stop: threading.Event | None) -> int:
        """Decompress the shard into the cache (called with ``_lock`` held): a pinned fd.
        ``wait_s``, ``stop``: as :meth:`hold`."""
        def copy(sink: GrowingFill) -> None:
            with self._open_compressed() as src:
                decompress(src, sink, self.what)
            if self.size is not None and sink.tell() != self.size:
                raise StorageError(self.what, f"decompressed to {sink.tell()} bytes, {self.size} when indexed: "
                                   "the shard changed since it was indexed")
            self.made += 1  # not when another process published the copy first

        log.info("turbofeed: decompressing %s into the node cache %s", self.what, self.cache.root)
        try:
            return self._fill(copy)
        except CacheFull as exc:
            if exc.over_bound:
                raise StorageError(self.what, self._no_room(exc)) from exc
        # The room is held by pinned copies. This process's own let go when not being
        # read: one retrier at a time (its .part is gone: it holds no room while it
        # waits) unpins them as they become idle and waits for the fills in progress;
        # when only other processes' copies stand in the way, it waits ``wait_s`` (0 for a
        # read: a dataset not streamed pins its copies for its life, waiting is in vain;
        # a hold or an index waits for the other ranks' short pins).
        with _RETRY_LOCK:
            start = time.monotonic()
            while True:
                release_idle(self.cache, but=self)
                try:
                    return self._fill(copy)
                except CacheFull as exc:
                    waited = time.monotonic() - start
                    if (exc.over_bound or (stop is not None and stop.is_set())
                            or waited > (_RETRY_S if _busy(self) else wait_s)):
                        raise StorageError(self.what, self._no_room(exc)) from exc
                time.sleep(_POLL_S)

    def _no_room(self, exc: CacheFull) -> str:
        if exc.over_bound:
            of = "" if self.packed is None else f" (from {self.packed} compressed bytes)"
            return f"its decompressed copy is over {exc.bound} bytes{of}, the node cache's bound: {bound_hint()}"
        return (f"the node cache has no room for its decompressed copy ({exc.needed} bytes so far; bound "
                f"{exc.bound} bytes, the rest held by copies in use by this or other processes): {bound_hint()}")

    def _fill(self, copy: Callable[[GrowingFill], None]) -> int:
        self._filling = True
        try:
            return self.cache.fill_stream(self.name, copy, expected=self.size)
        finally:
            self._filling = False


_RETRY_LOCK = threading.Lock()
_RETRY_S = 600.0  # a retrier waits at most this long for this process's fills in progress
_POLL_S = 0.02


def _busy(copy: PlainCopy) -> bool:
    """Whether another copy of this process in ``copy``'s cache is being made or is still
    pinned (being read: it lets go of its room once idle)."""
    return any(c is not copy and c.cache.root == copy.cache.root and (c._filling or c._fd is not None)
               for c in _live())


#: Seconds a copy made to be indexed waits for room other processes hold (their pins
#: while they index are short; a pin for a dataset's life ends the wait with StorageError).
INDEX_WAIT_S = 60.0

_LIVE: weakref.WeakSet[PlainCopy] = weakref.WeakSet()  # every copy of this process
_LIVE_LOCK = threading.Lock()  # a set must not grow while another thread lists it


def _live() -> list[PlainCopy]:
    with _LIVE_LOCK:
        return list(_LIVE)


def release_idle(cache: ShardCache, but: PlainCopy | None = None) -> bool:
    """Unpin every copy of this process in ``cache``'s folder not being read now (``but``
    excepted); True when one was."""
    root = cache.root
    return sum(c._try_release_idle() for c in _live() if c is not but and c.cache.root == root) > 0


def _close_fd(box: list) -> None:
    if box[0] is not None:
        os.close(box[0])


def local_plain_copy(path: str, identity: FileId, cache: ShardCache, size: int | None = None) -> PlainCopy:
    """The :class:`PlainCopy` of the local compressed shard ``path`` as it is now (``identity``)."""
    name = object_name("file://" + os.path.abspath(path), repr(tuple(identity)), identity.size, ".plain.tar")

    @contextlib.contextmanager
    def open_compressed() -> Iterator[BinaryIO]:
        with open(path, "rb") as f:
            if FileId.of(os.fstat(f.fileno())) != identity:
                raise StorageError(path, "changed on disk since it was indexed (replaced, rewritten or "
                                   "truncated); it is re-indexed when the next epoch starts")
            yield f
    return PlainCopy(cache, name, path, open_compressed, size, identity.size)


def index_plain(plain: PlainCopy, key: dict, index_path: str | None, shard: str) -> dict:
    """The index of ``plain``'s tar, cached at ``index_path`` (None: not cached) under
    ``key`` (the compressed shard's identity) with the copy's size (``plain_bytes``), which
    ``plain.size`` is set to. The copy is made if need be and pinned only while it is indexed.

    Raises:
        StorageError: the copy does not fit in the node cache.
        DatasetError: not a compressed tar, or a corrupt stream.
    """
    def build() -> dict:
        with plain.pinned() as copy:
            index = index_shard(copy)
        index["plain_bytes"] = index["file"]["size"]
        index.update(key)
        return index
    index = cached_index(index_path, key, build, shard)
    plain.size = int(index["plain_bytes"])
    return index
