"""Streaming mode's fetch stage: the shards of one rank's epoch, downloaded whole into the
node cache ahead of their use, held (pinned) until their last sample is read, then left
to the cache's eviction.

The rank's order (from :func:`turbofeed.plan.streaming.stream_order`) tells, for every
shard, the position of its first and of its last sample. Downloads start in order of
first use, at most ``concurrency`` at once, while the shards held plus the next one fit
in ``budget`` bytes (the node cache's bound)::

    positions    0 ........ 63 | 64 ....... 127 | 128 ...          (block 0 | block 1 | ...)
    shards       A C F A C F ..| B D E B D E .. |
    first use    A0 C1 F2       B64 D65 E66
    last use     A61 C63 F60    B127 ...
    held         A C F -> A C F B D E (prefetched while block 0 is read) -> B D E ...

A compressed shard (``.tar.gz`` ...) is held the same way through its decompressed copy
(:class:`~turbofeed.io.local.compressed.PlainCopy`): made in the node cache ahead of its
block (counted by the copy's size), unpinned after its last sample, so the copies of one
block at a time fill the cache, never more than its bound.

A reader that needs a shard not started yet starts it at once, whatever the budget (so
no reader waits on a release that its own batch holds up); when the cache has no room
for it after a few seconds of waiting for other processes to release theirs, the shard's
samples are read with ranged GETs (counted as ``cache_misses``). The ranks of a node share
the downloads through the cache's per-object lock: the second one to want a shard waits
for the first one's copy and pins it too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...engine.executor import Executor, ExecutorClosed
from ...engine.stages import StageInfo
from ...errors import StorageError

if TYPE_CHECKING:
    from ..local.compressed import PlainCopy
    from .shards import S3Shards, S3TarSource

log = logging.getLogger("turbofeed")

_NO_ROOM_WAIT_S = 5.0  # how long a fill waits for other processes to release room
_POLL_S = 0.05


class _Held:
    """One shard of the stream: its download's outcome, and who waits for it."""

    def __init__(self, size: int, plain: PlainCopy | None = None) -> None:
        self.size = size
        self.plain = plain          # a compressed shard's copy, held instead of ``fd``
        self.started = False
        self.ready = threading.Event()
        self.fd: int | None = None  # the pinned copy; None after release or without room
        self.readers = 0            # preads in progress on ``fd``
        self.released = False       # close ``fd`` once the last reader is done


class ShardStream:
    """Fetch stage of one streamed pass (see the module docstring).

    Args:
        shards: the dataset's ``s3://`` shards (client, node cache).
        sources: the dataset's sources, by shard index (only :class:`S3TarSource` are
            streamed; the others read as usual).
        order_shards: the shard index of every position of this rank's order.
        budget: bytes of shards to hold at once (the node cache's bound).
        concurrency: whole-shard downloads at once.
    """

    info = StageInfo("fetch.stream", "batch", ("shards_downloaded", "evictions"))

    def __init__(self, shards: S3Shards, sources: Sequence[object], order_shards: np.ndarray,
                 *, budget: int, concurrency: int = 2) -> None:
        from .shards import S3TarSource

        self._shards = shards
        self.budget = budget
        order_shards = np.asarray(order_shards, dtype=np.int64)
        uniq, first = np.unique(order_shards, return_index=True)
        _, last_rev = np.unique(order_shards[::-1], return_index=True)
        last = len(order_shards) - 1 - last_rev
        by_first = np.argsort(first, kind="stable")
        self._queue: list[int] = []        # shards to download, in order of first use
        self._last: dict[int, int] = {}    # shard -> last position that reads it
        self._held: dict[int, _Held] = {}
        self._index: dict[int, int] = {}   # id(source) -> shard
        for j in by_first.tolist():
            k = int(uniq[j])
            src = sources[k]
            if isinstance(src, S3TarSource):
                self._queue.append(k)
                self._last[k] = int(last[j])
                plain = src.plain
                if plain is None:
                    self._held[k] = _Held(src.info.size)
                    self._index[id(src)] = k  # read here; a compressed one reads its copy itself
                else:
                    self._held[k] = _Held(plain.size or src.info.size, plain)
        self._sources: dict[int, S3TarSource] = {k: sources[k] for k in self._queue}  # type: ignore[misc]
        self._next = 0        # next shard of the queue to start
        self._holding = 0     # bytes of started shards not yet released
        self._done = 0        # positions whose reads are all done
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = Executor(max(1, concurrency), "stream")
        self._warned = False
        self._pump()

    # ----- the readers' side ---------------------------------------------------------
    def read(self, source: object, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset`` of ``source``'s downloaded copy (waiting for the
        download, starting it if nobody has); None when the source is not streamed or has
        no copy (read it from the network).

        Raises:
            StorageError: a short read of the copy.
        """
        k = self._index.get(id(source))
        if k is None:
            return None
        held = self._held[k]
        if not held.started:
            self._start(k)
        while not held.ready.wait(_POLL_S):
            if self._stop.is_set():
                raise InterruptedError("the stream was closed")
        with self._lock:
            fd = held.fd
            if fd is None:
                return None
            held.readers += 1  # the descriptor stays open (its number is not reused) until we are done
        try:
            data = os.pread(fd, size, offset)
        finally:
            with self._lock:
                held.readers -= 1
                last = held.released and held.readers == 0
            if last:
                self._close(held)
        if len(data) != size:
            raise StorageError(self._sources[k].path, f"short read of its streamed copy at {offset} "
                               f"({len(data)} of {size} bytes)")
        return data

    # ----- the engine's side ---------------------------------------------------------
    def done(self, position: int) -> None:
        """Every read of positions ``< position`` is done: release the shards no later
        position reads, and start the downloads that now fit."""
        released = []
        with self._lock:
            self._done = max(self._done, position)
            for k, last in list(self._last.items()):
                if last < self._done:
                    del self._last[k]  # a download still running closes its copy when it ends
                    held = self._held[k]
                    if held.started:
                        self._holding -= held.size
                        if held.ready.is_set():
                            released.append(held)
        for held in released:
            self._close(held)
        self._pump()

    def close(self) -> None:
        """Stop downloading and release every held shard; idempotent."""
        self._stop.set()
        if self._shards.streamer is self:
            self._shards.streamer = None
        self._pool.close()
        for held in self._held.values():
            if held.ready.is_set():
                self._close(held)

    # ----- downloads -----------------------------------------------------------------
    def _pump(self) -> None:
        """Start downloads in order of first use while they fit the budget."""
        while True:
            with self._lock:
                while self._next < len(self._queue) and (
                        self._held[self._queue[self._next]].started or self._queue[self._next] not in self._last):
                    self._next += 1
                if self._next >= len(self._queue) or self._stop.is_set():
                    return
                k = self._queue[self._next]
                size = self._held[k].size
                if self._holding and self._holding + size > self.budget:
                    return
            self._start(k)

    def _start(self, k: int) -> None:
        with self._lock:
            held = self._held[k]
            if held.started:
                return
            held.started = True
            if k in self._last:
                self._holding += held.size
        try:
            self._pool.post(self._fetch, k)
        except ExecutorClosed:
            held.ready.set()

    def _fetch(self, k: int) -> None:
        held = self._held[k]
        src = self._sources[k]
        try:
            if held.plain is not None:
                held.plain.hold()  # made now, in its block's turn; pinned until released
                return
            waited = time.monotonic()
            never = src.info.size > self.budget  # no wait can make room (refused when asked, layout.py)
            while not self._stop.is_set():
                fd = self._shards.pinned_copy(src.info)
                if fd is not None or never or time.monotonic() - waited > _NO_ROOM_WAIT_S:
                    break
                time.sleep(_POLL_S)  # the room is held by other processes' pins: they move on
            else:
                fd = None
            held.fd = fd
            if fd is None and not self._stop.is_set():
                self._no_room(src)
        except InterruptedError:
            pass
        except Exception as exc:  # noqa: BLE001 - the shard's reads go to the network and report
            log.warning("turbofeed: streaming download of %s failed, reading its samples without it: %s",
                        src.path, exc)
        finally:
            with self._lock:
                held.ready.set()
                unused = self._stop.is_set() or k not in self._last
            if unused:  # released (or closed) while it was downloading
                self._close(held)

    def _no_room(self, src: S3TarSource) -> None:
        if not self._warned:
            self._warned = True
            log.warning("turbofeed: the node cache (%d bytes) has no room for %s, held by this or other "
                        "processes; its samples are read with ranged GETs. Raise S3Config.cache_max_bytes "
                        "to at least twice the largest block", self.budget, src.path)

    def _close(self, held: _Held) -> None:
        if held.plain is not None:
            held.plain.release()  # once its reads in progress end; evictable from then on
        with self._lock:
            held.released = True
            if held.readers:
                return  # the last reader closes it
            fd, held.fd = held.fd, None
        if fd is not None:
            os.close(fd)  # unpins: the cache may evict it from now on


def stream_shards(shards: S3Shards, sources: Sequence[S3TarSource | object], starts: np.ndarray,
                  order: np.ndarray, concurrency: int) -> ShardStream:
    """The :class:`ShardStream` of a rank reading ``order`` (global sample ids) of a
    dataset whose shard ``k`` holds ids ``starts[k] .. starts[k+1]-1``."""
    shard_of = np.searchsorted(np.asarray(starts), np.asarray(order), side="right") - 1
    stream = ShardStream(shards, sources, shard_of, budget=shards.cache.max_bytes, concurrency=concurrency)
    shards.streamer = stream  # reads go through it; the whole-dataset prefetch stops
    return stream
