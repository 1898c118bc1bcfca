"""``s3://`` WebDataset shards as sources: indexes, node cache and shard prefetch
(listing: :mod:`turbofeed.io.stores.urls`).

How a shard is read (``S3TarSource``):

1. **Index** (at dataset construction): from the local index cache, keyed by URL + version
   (:mod:`.versions`) + size, so a second run costs one LIST and no GET. On a miss the
   shard is downloaded once into the node cache with parallel ranged GETs and indexed there
   with the same code as a local tar (labels included), pinned meanwhile so that no
   eviction removes it under the indexer; the copy stays cached for the epoch. A shard the
   cache has no room for (larger than its bound, or the room is in use) is indexed from a
   private temporary copy (a unique name under ``s3-indexing/``, outside the bounded cache,
   removed at once). The copy's size must be the object's, or nothing is indexed or stored.
   Shards are indexed 8 at a time.
2. **Samples**: from the cached copy with one ``pread`` when it is there; otherwise one
   ranged GET of exactly the sample's bytes (from the loader's worker threads, so as many
   in flight as there are workers), and the shard is queued for prefetch. Every GET checks
   the version indexed (``If-Match``, :mod:`.versions`), so an object replaced during
   training fails with a :class:`~turbofeed.errors.StorageError` instead of returning bytes
   at the old offsets; so does a GET that still fails after the retry policy (an outage).
3. **Prefetch**: ``prefetch_shards`` threads (one :class:`~turbofeed.base.executor.Executor`
   per dataset, ``turbofeed-prefetch-<i>``) download whole shards into the node cache
   in the order they are first needed (plus the next shards in dataset order), so
   reads move from the network to the local disk early in the first epoch. Prefetch
   is on only when the whole dataset fits in the cache bound; otherwise a shuffled
   epoch would evict shards before their samples are read, and member GETs are cheaper.

Compressed objects (``.tar.gz``, ``.tgz``, ``.tar.bz2``, ``.tar.xz``) are downloaded whole,
decompressed into a plain copy in the node cache (counted against its bound, evictable
when not in use, made again when needed) and read from it
(:mod:`turbofeed.io.stores.compressed`); a copy larger than the bound raises
:class:`~turbofeed.errors.StorageError`. Objects that cannot be read as shards (zero
bytes, ``.tar.zst``, a corrupt compressed stream) have a source with no samples and a
``damage`` that says why, so the dataset warns, lists them in ``damaged`` and raises
under ``on_damage="raise"``, as for a damaged local shard.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from typing import TYPE_CHECKING

from ...base.executor import Executor, ExecutorClosed
from ...errors import DatasetError, StorageError
from ..local.files import FILES
from ..local.index import (TarDamage, index_shard, cached_index, default_cache_dir, report_damage,
                          table_from_index, unreadable_index, without_images)
from ..retry import RemoteError
from ..source import Source
from .cache import ShardCache, object_name
from .compressed import open_plain
from .copies import check_copy, temporary_copy
from .config import ObjectInfo, S3Config, S3Stats, cache_limit, default_config
from .errors import changed, not_found
from .urls import COMPRESSED, shared_client, stat
from .versions import warn_unversioned

if TYPE_CHECKING:
    from ..local.compressed import PlainCopy
    from .stream import ShardStream

log = logging.getLogger("turbofeed")

__all__ = ["S3Shards", "S3TarSource", "piece_name"]

_JOIN_TIMEOUT_S = 5.0
# Bumped when s3:// indexes built earlier must not be trusted. 2: built from a private,
# size-checked copy (1 could read labels from another thread's copy of another shard).
_S3_INDEX = 2


class S3Shards:
    """The ``s3://`` shards of one dataset: their client, node cache, indexes and prefetch.

    Invariants: at most ``config.prefetch_shards`` whole-shard downloads run at once,
    each shard is queued for prefetch at most once, and bytes in flight are bounded by
    the client (``max_concurrency * part_size``).

    Args:
        urls: the shard URLs, in dataset order.
        config: the :class:`S3Config` (default: the process default).
        cache_dir: turbofeed's cache folder (index cache and the ``s3`` object cache).
    """

    def __init__(self, urls: list[str], *, config: S3Config | None = None,
                 cache_dir: str | None = None) -> None:
        self.config = config or default_config()
        cache_dir = cache_dir or default_cache_dir()
        self.index_dir = os.path.join(cache_dir, "s3-index")
        self.scratch = os.path.join(cache_dir, "s3-indexing")
        self.infos: dict[str, ObjectInfo] = {}
        try:
            self.client = shared_client(self.config)
            for url in urls:
                try:
                    self.infos[url] = stat(url, self.client)
                except RemoteError as exc:
                    if not_found(exc):  # deleted since it was listed
                        raise DatasetError(f"no such object: {url}") from exc
                    raise
        except RemoteError as exc:
            raise DatasetError(str(exc)) from exc
        warn_unversioned(list(self.infos.values()))
        self.cache = ShardCache(os.path.join(cache_dir, "s3"), cache_limit(self.config),
                                on_evict=functools.partial(_evicted, self.client.stats))
        total = sum(i.size for i in self.infos.values())
        self.prefetch = self.config.prefetch_shards > 0 and total <= self.cache.max_bytes
        self.sources: list[S3TarSource] = []
        self._order = {url: k for k, url in enumerate(urls)}
        self._by_index: dict[int, S3TarSource] = {}
        self._queued: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # Its tasks hold only a weak reference: a dataset dropped without close() is
        # collected, and the finalizer stops the downloads.
        self._prefetcher = Executor(self.config.prefetch_shards, "prefetch") if self.prefetch else None
        self.streamer: ShardStream | None = None  # streaming mode's fetch stage, while a pass runs
        self._finalizer = weakref.finalize(self, _stop_prefetch, self._stop, self._prefetcher)

    # ----- construction ------------------------------------------------------------
    def open(self, url: str, *, on_damage: str = "skip", labels: bool = True) -> S3TarSource:
        """Index one shard (see the module docstring) and return its source."""
        info = self.infos[url]
        unreadable = _unreadable(info)
        try:
            if unreadable is not None:
                index = unreadable_index(TarDamage(0, unreadable, cut=False))
                src = S3TarSource(info, index, self, on_damage=on_damage, labels=labels)
            elif url.endswith(COMPRESSED):
                src = self._open_compressed(info, on_damage, labels)
            else:
                src = S3TarSource(info, self._index(info), self, on_damage=on_damage, labels=labels)
        except (RemoteError, OSError) as exc:
            raise DatasetError(f"{url}: cannot index: {exc}") from exc
        with self._lock:
            self._by_index[self._order[url]] = src
        return src

    def _open_compressed(self, info: ObjectInfo, on_damage: str, labels: bool) -> S3TarSource:
        try:
            plain, index = open_plain(self, info, _cache_name(info), {
                "etag": info.version, "size": info.size, "url": info.url, "s3_index": _S3_INDEX})
        except DatasetError as exc:  # not a compressed tar, or a corrupt stream: reported
            index = unreadable_index(TarDamage(0, str(exc).removeprefix(f"{info.url}: "), cut=False))
            return S3TarSource(info, index, self, on_damage=on_damage, labels=labels)
        try:
            return S3TarSource(info, index, self, on_damage=on_damage, labels=labels, plain=plain)
        except BaseException:
            plain.release()
            raise

    def _index_path(self, info: ObjectInfo) -> str | None:
        """Where ``info``'s index is cached (None: its key could never be found again)."""
        name = object_name(info.url, info.version, info.size, ".json")
        return os.path.join(self.index_dir, name) if info.versioned else None

    def _index(self, info: ObjectInfo) -> dict:
        key = {"etag": info.version, "size": info.size, "url": info.url, "s3_index": _S3_INDEX}
        return cached_index(self._index_path(info), key, lambda: self._build(info), info.url)

    def _build(self, info: ObjectInfo) -> dict:
        """Index the node cache's copy (downloaded there first if needed), pinned while
        it is read; without room in the cache, a private temporary copy."""
        fd = self.pinned_copy(info)
        if fd is None:
            index = self._build_from_temporary_copy(info)
        else:
            try:
                check_copy(info, fd, self.cache.path(_cache_name(info)))
                index = index_shard(self.cache.path(_cache_name(info)))
            finally:
                os.close(fd)  # unpins it
        index.update(etag=info.version, size=info.size, url=info.url, s3_index=_S3_INDEX)
        return index

    def _build_from_temporary_copy(self, info: ObjectInfo) -> dict:
        with temporary_copy(self.client, info, self.scratch, self._stop) as (_, path):
            return index_shard(path)

    def pinned_copy(self, info: ObjectInfo) -> int | None:
        """A pinned descriptor of the node cache's copy (see :meth:`ShardCache.open`),
        downloaded there if needed; None when the cache has no room for it."""
        name = _cache_name(info)
        fd = self.cache.open(name)
        if fd is not None:
            return fd

        downloaded = []

        def write(fd: int) -> None:
            self.client.download_to(info.url, info.size, fd, self._stop, expect=info)
            downloaded.append(True)
        fd = self.cache.fill_open(name, info.size, write, self._stop)
        if downloaded and fd is not None:  # counted once published: a reader finds it from now on
            self.client.stats.add(shards_downloaded=1)
        return fd

    def pinned_piece(self, info: ObjectInfo, lo: int, hi: int) -> int | None:
        """As :meth:`pinned_copy`, of the object's bytes ``[lo, hi)`` only (a piece of a shard,
        :mod:`turbofeed.plan.pieces`): an entry of its own, named by URL, ETag and range
        (the ranks of a node share it); its byte ``i`` is the object's ``lo + i``."""
        name = piece_name(info, lo, hi)
        fd = self.cache.open(name)
        if fd is not None:
            return fd
        downloaded = []

        def write(fd: int) -> None:
            self.client.download_to(info.url, hi - lo, fd, self._stop, expect=info, start=lo)
            downloaded.append(True)
        fd = self.cache.fill_open(name, hi - lo, write, self._stop)
        if downloaded and fd is not None:
            self.client.stats.add(pieces_downloaded=1)
        return fd

    def fetch(self, info: ObjectInfo) -> str | None:
        """The node cache's copy of the object, downloaded if needed; None if it cannot fit.
        Not pinned: open it at once and read through the descriptor."""
        fd = self.pinned_copy(info)
        if fd is None:
            return None
        os.close(fd)
        return self.cache.path(_cache_name(info))

    def adopt(self, src: S3TarSource) -> S3TarSource:
        """Take ``src``, built from the dataset index (:mod:`..dsindex`), as :meth:`open` would."""
        with self._lock:
            self._by_index[self._order[src.path]] = src
        return src

    # ----- prefetch ------------------------------------------------------------------
    def want(self, src: S3TarSource) -> None:
        """Queue ``src`` (and the shards after it) for download into the node cache."""
        if self._prefetcher is None or self._stop.is_set() or self.streamer is not None:
            return
        k = self._order[src.path]
        with self._lock:
            wanted = [j for j in range(k, min(k + 1 + self.config.prefetch_shards, len(self._order)))
                      if j not in self._queued and j in self._by_index]
            self._queued.update(wanted)
        for j in wanted:
            try:
                self._prefetcher.post(_prefetch, weakref.ref(self), j)
            except ExecutorClosed:  # closing meanwhile
                return

    def _prefetch_one(self, k: int) -> None:
        src = self._by_index[k]
        if src._local is not None:
            return
        try:
            src._local = self.fetch(src.info)
        except InterruptedError:
            raise  # closing: not a failure worth a warning
        except (RemoteError, OSError) as exc:
            log.warning("turbofeed: prefetch of %s failed, reading its samples directly: %s",
                        src.path, exc)

    def stats(self) -> dict:
        return self.client.stats.as_dict()

    def close(self) -> None:
        """Stop prefetching (the client is shared and stays open); idempotent."""
        self._finalizer()


def _prefetch(ref: weakref.ref, k: int) -> None:
    """Download shard ``k`` of the shards ``ref`` points to, unless they are gone."""
    shards = ref()
    if shards is None or shards._stop.is_set():
        return
    try:
        shards._prefetch_one(k)
    except InterruptedError:
        pass  # closing
    finally:
        del shards  # the last reference may go here: the finalizer handles that


def _cache_name(info: ObjectInfo) -> str:
    return object_name(info.url, info.version, info.size, ".tar")


def piece_name(info: ObjectInfo, lo: int, hi: int) -> str:
    """The node-cache name of the object's bytes ``[lo, hi)``."""
    return object_name(info.url, info.version, info.size, f".{lo}-{hi}.piece")


def _unreadable(info: ObjectInfo) -> str | None:
    """Why an object named as a shard is not read at all, or None."""
    if info.url.endswith(".tar.zst"):
        return ("zstd-compressed tar, not read (no zstd in Python's standard library): "
                "decompress it once (`zstd -d`) and upload the plain .tar")
    if info.size == 0:
        return "empty object (0 bytes)"
    return None


def _evicted(stats: S3Stats, path: str) -> None:
    FILES.close(path)  # this process's descriptor would hold the evicted file's disk space
    stats.add(evictions=1)


def _stop_prefetch(stop: threading.Event, prefetcher: Executor | None) -> None:
    stop.set()  # downloads in progress stop at their next part
    if prefetcher is not None:
        prefetcher.close(_JOIN_TIMEOUT_S)  # drops the queue; warns naming a thread still running


class S3TarSource(Source):
    """One ``s3://`` WebDataset shard: the :class:`~turbofeed.io.Source` interface.

    ``read(i)`` serves sample ``i`` (``read_member(i, ext)`` one of its members) from the
    node cache's copy when present, else with one ranged GET (retried per the client's
    policy); a compressed object's only from ``plain``, its decompressed copy in the node
    cache (:class:`~turbofeed.io.local.compressed.PlainCopy`). Thread-safe. A GET that
    still fails after the retry policy, or finds the object replaced or deleted, raises
    :class:`~turbofeed.errors.StorageError`.
    """

    def __init__(self, info: ObjectInfo, index: dict, shards: S3Shards, *, on_damage: str = "skip",
                 labels: bool = True, plain: PlainCopy | None = None) -> None:
        self.path = info.url
        self.info = info
        self._shards = shards
        self._name = _cache_name(info)
        self._local: str | None = shards.cache.lookup(self._name)
        self.plain = plain  # a compressed object's copy: never prefetched nor streamed as an object
        damage = None if index["damage"] is None else TarDamage(*index["damage"])
        self.table = table_from_index(index, labels=labels, read=lambda size, offset: self._read(offset, size))
        if labels:
            self.table, damage = without_images(self.table, damage)
        self.damage = damage
        report_damage(damage, self.path, len(self.table), on_damage)

    def read(self, i: int) -> bytes:
        return self._read(int(self.table.offsets[i]), int(self.table.sizes[i]))

    def read_member(self, i: int, ext: str) -> bytes | None:
        """Sample ``i``'s member with extension ``ext``, read as :meth:`read` reads the
        image; None when the sample has no such member."""
        found = self.table.find_member(i, ext)
        return None if found is None else self._read(*found)

    def member_exts(self, i: int) -> tuple[str, ...]:
        return self.table.exts_of(i)

    @property
    def compressed(self) -> bool:
        """Read from a plain copy in the node cache (a compressed object)."""
        return self.plain is not None

    def _read(self, offset: int, size: int) -> bytes:
        stats = self._shards.client.stats
        streamer = self._shards.streamer
        streamed = None if streamer is None else streamer.read(self, offset, size)
        if streamed is not None:
            stats.add(cache_hits=1)
            return streamed
        if self.plain is not None:
            stats.add(cache_hits=1)
            return self.plain.pread(offset, size)
        local = self._local or self._shards.cache.lookup(self._name)
        if local is not None:
            try:
                data = FILES.pread(local, size, offset)
                if len(data) == size:
                    self._local = local
                    self._shards.cache.touch(self._name)
                    stats.add(cache_hits=1)
                    return data
            except FileNotFoundError:
                pass
            self._local = None  # evicted by another process: back to the network
        self._shards.want(self)
        stats.add(cache_misses=1)
        try:
            return bytes(self._shards.client.get_range(self.path, offset, offset + size,
                                                       expect=self.info))
        except RemoteError as exc:  # after the retry policy: a storage fault, never bad data
            if changed(exc) or not_found(exc):
                what = "replaced" if changed(exc) else "deleted"
                raise StorageError(self.path, f"{what} since it was indexed ({self.info.describe()}); "
                                   "build the dataset again to read the new version") from exc
            raise StorageError(self.path, str(exc).removeprefix(self.path).lstrip(": ")) from exc

    def close(self) -> None:
        if self.plain is not None:
            self.plain.release()
        elif self._local is not None:
            FILES.close(self._local)

    def __repr__(self) -> str:
        return f"S3TarSource({self.path!r}, samples={len(self.table)})"
