"""``s3://`` WebDataset shards as sources: listing, indexes, node cache and shard prefetch.

How a shard is read (``S3TarSource``):

1. **Index** (at dataset construction): from the local index cache, keyed by URL +
   ETag + size, so a second run costs one LIST and no GET. On a miss the shard is
   downloaded once into the node cache with parallel ranged GETs and indexed there
   with the same code as a local tar (labels included); the copy stays cached for the
   epoch. Shards are indexed 8 at a time.
2. **Samples**: from the cached copy with one ``pread`` when it is there; otherwise one
   ranged GET of exactly the sample's bytes (from the loader's worker threads, so as
   many in flight as there are workers), and the shard is queued for prefetch. Every
   GET carries ``If-Match: <ETag at indexing>``, so an object replaced during training
   fails with a clear error instead of returning bytes at the old offsets.
3. **Prefetch**: ``prefetch_shards`` threads download whole shards into the node cache
   in the order they are first needed (plus the next shards in dataset order), so
   reads move from the network to the local disk early in the first epoch. Prefetch
   is on only when the whole dataset fits in the cache bound; otherwise a shuffled
   epoch would evict shards before their samples are read, and member GETs are cheaper.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
import threading
import time
import weakref
from collections import deque


from ..errors import DatasetError
from .cache import ShardCache, object_name
from .files import FILES
from .paths import expand_braces
from .retry import RemoteError
from .s3client import ObjectInfo, S3Client, S3Config, default_config, parse_size, parse_url
from .s3errors import changed, not_found
from .tar import TarDamage, _build_index, cached_index, default_cache_dir, table_from_index

log = logging.getLogger("turbofeed")

_CLIENTS: dict[tuple, S3Client] = {}
_CLIENTS_LOCK = threading.Lock()
# Sizes and ETags found while resolving a spec, handed to the S3Shards built right after
# it (taken once, so a later dataset looks again and sees a replaced object).
_KNOWN_TTL_S = 60.0
_KNOWN: dict[tuple[str, str], tuple[float, ObjectInfo]] = {}
_JOIN_TIMEOUT_S = 5.0


def shared_client(config: S3Config | None = None) -> S3Client:
    """The process's one :class:`S3Client` for ``config`` (default: the configured default)
    and the current ``AWS_*`` variables."""
    config = config or default_config()
    key = (config, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = S3Client(config)
        return client


def close_clients() -> None:
    """Close the shared clients (tests, interpreter exit); later calls make new ones."""
    with _CLIENTS_LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
        _KNOWN.clear()
    for client in clients:
        client.close()


def _remember(client: S3Client, infos: list[ObjectInfo]) -> None:
    now = time.monotonic()
    for info in infos:
        _KNOWN[(client.endpoint, info.url)] = (now, info)


def stat(url: str, client: S3Client) -> ObjectInfo:
    """Size and ETag of ``url``: from the listing that resolved it a moment ago, else a HEAD."""
    hit = _KNOWN.pop((client.endpoint, url), None)
    if hit is not None and time.monotonic() - hit[0] < _KNOWN_TTL_S:
        return hit[1]
    return client.head(url)


def resolve_urls(text: str, config: S3Config | None = None) -> list[str]:
    """Expand an ``s3://`` spec into shard URLs, checking that they exist.

    ``s3://b/train/shard-{000..099}.tar`` (braces), ``s3://b/train/*.tar`` (glob),
    ``s3://b/train/`` or ``s3://b/train`` (every ``.tar`` below the prefix, sorted).
    One LIST per folder, not one request per shard.

    Raises:
        DatasetError: objects are missing, a prefix holds no ``.tar``, an object is not a
            plain tar, no credentials were found, or the endpoint cannot be reached
            (fails within about a second: see :class:`~turbofeed.io.s3client.S3Config`).
    """
    out: list[str] = []
    exact: list[str] = []
    try:
        client = shared_client(config)
        for url in expand_braces(text):
            bucket, key = parse_url(url)
            if glob.has_magic(key):
                head = key[:min(key.find(c) for c in "*?[" if c in key)]
                hits = [o for o in client.list(f"s3://{bucket}/{head}")
                        if fnmatch.fnmatchcase(o.url, url)]
                _remember(client, hits)
                if not hits:
                    raise DatasetError(f"{url}: pattern matches no objects")
                out.extend(_check_tars(hits))
            elif key.endswith(".tar"):
                exact.append(url)
                out.append(url)
            elif key.endswith((".tar.gz", ".tgz")):
                raise DatasetError(f"{url}: compressed tar; turbofeed reads plain .tar shards "
                                   "(decompress once with `gunzip`) for random access")
            else:
                folder = url if url.endswith("/") or not key else url + "/"
                hits = [o for o in client.list(folder) if o.url.endswith(".tar")]
                if not hits:
                    raise DatasetError(f"{folder}: no .tar objects under this prefix")
                _remember(client, hits)
                out.extend(o.url for o in hits)
        _check_exist(exact, client)
    except RemoteError as exc:
        raise DatasetError(str(exc) if text in str(exc) else f"{text}: {exc}") from exc
    except ValueError as exc:  # a malformed URL (no bucket)
        raise DatasetError(str(exc)) from exc
    return out


def _check_tars(hits: list[ObjectInfo]) -> list[str]:
    for o in hits:
        if not o.url.endswith(".tar"):
            raise DatasetError(f"{o.url}: not a .tar shard")
    return [o.url for o in hits]


def _check_exist(urls: list[str], client: S3Client) -> None:
    """Find every URL with one LIST per folder (HEAD when a folder has few of them)."""
    folders: dict[str, list[str]] = {}
    for url in urls:
        folders.setdefault(url[:url.rfind("/") + 1], []).append(url)
    missing = []
    for folder, members in folders.items():
        if len(members) > 4:
            listed = {o.url: o for o in client.list(folder)}
            _remember(client, [listed[u] for u in members if u in listed])
            missing.extend(u for u in members if u not in listed)
        else:
            for url in members:
                try:
                    _remember(client, [client.head(url)])
                except RemoteError as exc:
                    if not not_found(exc):
                        raise
                    missing.append(url)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise DatasetError(f"no such object: {shown}")


def _cache_limit(config: S3Config) -> int | None:
    if config.cache_max_bytes is not None:
        return config.cache_max_bytes
    return parse_size(os.environ.get("TURBOFEED_S3_CACHE_SIZE"))


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
        self.cache = ShardCache(os.path.join(cache_dir, "s3"), _cache_limit(self.config))
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
        total = sum(i.size for i in self.infos.values())
        self.prefetch = self.config.prefetch_shards > 0 and total <= self.cache.max_bytes
        self.sources: list[S3TarSource] = []
        self._order = {url: k for k, url in enumerate(urls)}
        self._by_index: dict[int, S3TarSource] = {}
        self._wanted: deque[int] = deque()
        self._queued: set[int] = set()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._finalizer = weakref.finalize(self, _stop_threads, self._stop, self._cond, self._threads)

    # ----- construction ------------------------------------------------------------
    def open(self, url: str, *, on_damage: str = "skip") -> S3TarSource:
        """Index one shard (see the module docstring) and return its source."""
        info = self.infos[url]
        try:
            index = self._index(info)
        except RemoteError as exc:
            raise DatasetError(f"{url}: cannot index: {exc}") from exc
        src = S3TarSource(info, index, self, on_damage=on_damage)
        with self._cond:
            self._by_index[self._order[url]] = src
        return src

    def _index_path(self, info: ObjectInfo) -> str:
        return os.path.join(self.index_dir, object_name(info.url, info.etag, info.size, ".json"))

    def _index(self, info: ObjectInfo) -> dict:
        return cached_index(self._index_path(info), {"etag": info.etag, "size": info.size},
                            lambda: self._build(info), info.url)

    def _build(self, info: ObjectInfo) -> dict:
        """Index from the node cache's copy, downloading it there first (or to a
        temporary file when it is larger than the whole cache)."""
        path = self.fetch(info)
        temporary = path is None
        if temporary:
            path = os.path.join(self.cache.tmp, f"index.{os.getpid()}.{threading.get_ident()}.tar")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                self.client.download_to(info.url, info.size, fd, self._stop, etag=info.etag)
            finally:
                os.close(fd)
        try:
            index = _build_index(path)
        finally:
            if temporary:
                os.unlink(path)
        index.update(etag=info.etag, size=info.size, url=info.url)
        return index

    def fetch(self, info: ObjectInfo) -> str | None:
        """The node cache's copy of the object, downloaded if needed; None if it cannot fit."""
        name = object_name(info.url, info.etag, info.size, ".tar")
        found = self.cache.lookup(name)
        if found is not None:
            return found

        def write(fd: int) -> None:
            self.client.download_to(info.url, info.size, fd, self._stop, etag=info.etag)
            self.client.stats.add(shards_downloaded=1)
        before = self.cache.evictions
        path = self.cache.fill(name, info.size, write, self._stop)
        self.client.stats.add(evictions=self.cache.evictions - before)
        return path

    # ----- prefetch ------------------------------------------------------------------
    def want(self, src: S3TarSource) -> None:
        """Queue ``src`` (and the shards after it) for download into the node cache."""
        if not self.prefetch or self._stop.is_set():
            return
        k = self._order[src.path]
        with self._cond:
            for j in range(k, min(k + 1 + self.config.prefetch_shards, len(self._order))):
                if j not in self._queued and j in self._by_index:
                    self._queued.add(j)
                    self._wanted.append(j)
            if not self._threads:
                for i in range(self.config.prefetch_shards):
                    t = threading.Thread(target=_prefetch_loop, args=(weakref.ref(self), self._stop,
                                                                      self._cond, self._wanted),
                                         name=f"turbofeed-prefetch-{i}", daemon=True)
                    self._threads.append(t)
                    t.start()
            self._cond.notify_all()

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


def _prefetch_loop(ref: weakref.ref, stop: threading.Event, cond: threading.Condition,
                   wanted: deque) -> None:
    while not stop.is_set():
        with cond:
            if not wanted:
                cond.wait(0.1)
                continue
            k = wanted.popleft()
        shards = ref()
        if shards is None:
            return
        try:
            shards._prefetch_one(k)
        except InterruptedError:
            return
        finally:
            del shards


def _stop_threads(stop: threading.Event, cond: threading.Condition, threads: list) -> None:
    stop.set()
    with cond:
        cond.notify_all()
    for t in threads:
        if t is not threading.current_thread():
            t.join(_JOIN_TIMEOUT_S)
            if t.is_alive():
                log.warning("turbofeed: thread %s still running after close()", t.name)


class S3TarSource:
    """One ``s3://`` WebDataset shard: the :class:`~turbofeed.io.Source` interface.

    ``read(i)`` serves sample ``i`` from the node cache's copy when present, else with one
    ranged GET (retried per the client's policy). Thread-safe.
    """

    def __init__(self, info: ObjectInfo, index: dict, shards: S3Shards, *, on_damage: str = "skip") -> None:
        self.path = info.url
        self.info = info
        self._shards = shards
        self._name = object_name(info.url, info.etag, info.size, ".tar")
        self._local: str | None = shards.cache.lookup(self._name)
        self.damage = None if index["damage"] is None else TarDamage(*index["damage"])
        if self.damage is not None:
            message = (f"{self.path}: truncated or corrupt at byte offset {self.damage.offset}: "
                       f"{self.damage.reason}")
            if on_damage == "raise":
                raise DatasetError(message)
            log.warning("turbofeed: %s; using the %d samples before it", message, len(index["rows"]))
        self.table = table_from_index(index)

    def read(self, i: int) -> bytes:
        size, offset = int(self.table.sizes[i]), int(self.table.offsets[i])
        stats = self._shards.client.stats
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
                                                       etag=self.info.etag))
        except RemoteError as exc:
            if changed(exc) or not_found(exc):
                what = "replaced" if changed(exc) else "deleted"
                raise RemoteError(f"{self.path}: {what} since it was indexed (ETag {self.info.etag}); "
                                  "build the dataset again to read the new version") from exc
            raise

    def close(self) -> None:
        if self._local is not None:
            FILES.close(self._local)

    def __repr__(self) -> str:
        return f"S3TarSource({self.path!r}, samples={len(self.table)})"
