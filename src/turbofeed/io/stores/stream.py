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

A shard is held per block that reads it (the plan tells each position's block): a shard
read in several blocks (drawn again by a resampled epoch, or in each pass of a weighted
epoch of several passes) is held again for each (from the node cache while the copy is
still there), never from its first use to its last over the epoch, so the bound holds
however often a shard comes back. A resampled epoch's order
(:mod:`turbofeed.plan.stream_rounds`) is never whole: its holds are made a round at a
time, as the downloads (or a reader) reach it.

A compressed shard (``.tar.gz`` ...) is held the same way through its decompressed copy
(:class:`~turbofeed.io.local.compressed.PlainCopy`): made in the node cache ahead of its
block (counted by the copy's size), unpinned after its last sample, so the copies of one
block at a time fill the cache, never more than its bound.

Pieces of shards (:mod:`turbofeed.plan.pieces`) are held as shards are, each fetched with
ranged GETs into its own node-cache entry (:meth:`~turbofeed.io.stores.shards.S3Shards.pinned_piece`)
and read at piece-relative offsets.

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
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...base.executor import Executor, ExecutorClosed
from ...base.stageinfo import StageInfo
from ...errors import StorageError
from ...plan.pieces import Pieces

if TYPE_CHECKING:
    from ...plan.stream_rounds import RoundsRankOrder
    from ..local.compressed import PlainCopy
    from .shards import S3Shards, S3TarSource

log = logging.getLogger("turbofeed")

_NO_ROOM_WAIT_S = 5.0  # how long a fill waits for other processes to release room
_PLAIN_WAIT_S = 60.0   # the same for a compressed shard's copy, which has no ranged-GET fallback
_POLL_S = 0.05
_MAKE_AHEAD = 1 << 20  # positions past the last batch done whose holds the downloads may make


class _Held:
    """One hold of the stream: piece ``k`` (a whole shard, or a piece of one) from its first
    use to position ``last`` (a piece the order reads in two blocks, or two rounds, has a
    hold for each), its download's outcome, and who waits for it."""

    def __init__(self, k: int, last: int, size: int, plain: PlainCopy | None = None) -> None:
        self.k = k
        self.last = last            # the last position of the rank's order that reads it
        self.size = size
        self.plain = plain          # a compressed shard's copy, held instead of ``fd``
        self.started = False
        self.dropped = False        # every position reading it is done: no longer counted
        self.ready = threading.Event()
        self.fd: int | None = None  # the pinned copy; None after release or without room
        self.readers = 0            # preads in progress on ``fd``
        self.released = False       # close ``fd`` once the last reader is done


Chunk = tuple[int, np.ndarray, "np.ndarray | None"]  # (first position, sample ids, block of each or None)


class ShardStream:
    """Fetch stage of one streamed pass (see the module docstring).

    The rank's order comes in chunks (the whole order as one, or a resampled epoch's
    rounds, :meth:`turbofeed.plan.stream_rounds.RoundsRankOrder.chunks`), read lazily:
    the holds of a chunk are made when the downloads reach it or a reader needs it,
    at most ``ahead`` positions past the last batch done (plus what the budget lets
    the downloads run ahead). Invariant: the bytes of started holds not yet done stay
    within ``budget``, except for a hold a reader needs at once.

    Args:
        shards: the dataset's ``s3://`` shards (client, node cache).
        sources: the dataset's sources, by shard index (only :class:`S3TarSource` are
            streamed; the others read as usual).
        starts: int64 ``[K + 1]``: shard ``k`` holds sample ids ``starts[k] .. starts[k+1]-1``.
        chunks: the rank's order, chunk by chunk.
        budget: bytes of shards to hold at once (the node cache's bound).
        concurrency: whole-shard downloads at once.
        ahead: positions a read may be ahead of the last batch done (the batches in flight).
        pieces: the pieces the order's units are (:mod:`turbofeed.plan.pieces`); None:
            whole shards.
    """

    info = StageInfo("fetch.stream", "batch", ("shards_downloaded", "pieces_downloaded", "evictions"))

    def __init__(self, shards: S3Shards, sources: Sequence[object], starts: np.ndarray, chunks: Iterable[Chunk],
                 *, budget: int, concurrency: int = 2, ahead: int = 4096, pieces: Pieces | None = None) -> None:
        from .shards import S3TarSource

        self._shards = shards
        self.budget = budget
        self._sources: dict[int, S3TarSource] = {k: s for k, s in enumerate(sources) if isinstance(s, S3TarSource)}
        if pieces is None:
            pieces = Pieces.whole_shards(starts, [s.info.size if isinstance(s, S3TarSource) else 0 for s in sources])
        self._pieces = pieces
        self._starts = np.asarray(pieces.starts, dtype=np.int64)  # the holds' units: pieces
        self._streamed = int(np.isin(pieces.shard, list(self._sources)).sum())
        # a compressed one's reads come here too: its copy is made in its block's turn
        self._index = {id(s): k for k, s in self._sources.items()}
        self._chunks = iter(chunks)
        self._frontier = 0    # positions whose holds are made
        self._ahead = max(1, ahead)
        self._queue: deque[_Held] = deque()      # holds not started, in order of first use
        self._live: list[_Held] = []             # holds made and not dropped
        self._by_shard: dict[int, list[_Held]] = {}  # shard -> its live holds, in order
        self._done = 0        # positions whose reads are all done
        self._holding = 0     # bytes of started holds not yet dropped
        self._lock = threading.Lock()
        self._make_lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = Executor(max(1, concurrency), "stream")
        self._warned = False
        self._pump()

    # ----- the readers' side ---------------------------------------------------------
    def read(self, source: object, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset`` of ``source``'s downloaded copy (waiting for the
        download, starting it if nobody has); None when the source is not streamed or has
        no copy (read it from the network). A compressed shard's from its decompressed copy.

        Raises:
            StorageError: a short read of the copy, or a compressed shard's copy has no
                room in the node cache.
        """
        shard = self._index.get(id(source))
        if shard is None:
            return None
        plain = self._sources[shard].plain
        k = self._pieces.holding(shard, offset, size)
        if k is None:
            return None  # no piece holds all of it: from the network
        fd: int | None = None
        for _ in range(3):  # a hold dropped under us (its reads done) leaves the next one
            held = self._hold_of(k)
            if held is None:
                break
            if not held.started:
                self._start(held)
            while not held.ready.wait(_POLL_S):
                if self._stop.is_set():
                    raise InterruptedError("the stream was closed")
            if plain is not None:
                break
            with self._lock:
                fd = held.fd
                if fd is None:
                    if held.dropped:
                        continue
                    return None
                held.readers += 1  # the descriptor stays open (its number is not reused) until we are done
            break
        else:
            held = None
        if plain is not None:
            # a compressed shard has no ranged-GET fallback: its copy, made by _fetch, or
            # made again now (evicted, or read outside its hold) waiting for room as a
            # hold does, since the other ranks of the node let go after their block
            return plain.pread(offset, size, _PLAIN_WAIT_S, self._stop)
        if held is None or fd is None:
            return None
        try:
            data = os.pread(fd, size, offset - int(self._pieces.lo[k]))
        finally:
            with self._lock:
                held.readers -= 1
                last = held.released and held.readers == 0
            if last:
                self._close(held)
        if len(data) != size:
            raise StorageError(self._sources[shard].path, f"short read of its streamed copy at {offset} "
                               f"({len(data)} of {size} bytes)")
        return data

    def _hold_of(self, k: int) -> _Held | None:
        """Piece ``k``'s first live hold, making holds up to ``ahead`` positions past the
        last batch done to find one; None if no position there reads it."""
        while True:
            with self._lock:
                found = self._by_shard.get(k)
                if found:
                    return found[0]
                if self._frontier >= self._done + self._ahead:
                    return None
            if not self._make():
                return None

    # ----- the engine's side ---------------------------------------------------------
    def done(self, position: int) -> None:
        """Every read of positions ``< position`` is done: release the holds no later
        position reads, and start the downloads that now fit."""
        released = []
        with self._lock:
            self._done = max(self._done, position)
            live = []
            for held in self._live:
                if held.last >= self._done:
                    live.append(held)
                    continue
                held.dropped = True  # a download still running closes its copy when it ends
                self._by_shard[held.k].remove(held)
                if not self._by_shard[held.k]:
                    del self._by_shard[held.k]
                if held.started:
                    self._holding -= held.size
                    if held.ready.is_set():
                        released.append(held)
            self._live = live
        for held in released:
            self._close(held)
        self._pump()

    def close(self) -> None:
        """Stop downloading and release every held shard; idempotent."""
        self._stop.set()
        if self._shards.streamer is self:
            self._shards.streamer = None
        self._pool.close()
        with self._lock:
            live = list(self._live)
        for held in live:
            if held.ready.is_set():
                self._close(held)

    # ----- holds ---------------------------------------------------------------------
    def _make(self) -> bool:
        """Make the holds of the next chunk of the order; False at its end."""
        with self._make_lock:
            if self._stop.is_set():
                return False
            chunk = next(self._chunks, None)
            if chunk is None:
                return False
            j0, ids, block = chunk
            made = self._holds(j0, np.asarray(ids, dtype=np.int64), block)
            with self._lock:
                self._frontier = j0 + len(ids)
                for held in made:
                    if held.last < self._done:
                        continue  # read already (a chunk made late)
                    self._queue.append(held)
                    self._live.append(held)
                    self._by_shard.setdefault(held.k, []).append(held)
            return True

    def _holds(self, j0: int, ids: np.ndarray, block: np.ndarray | None) -> list[_Held]:
        """The holds of one chunk, in order of first use: one per (piece, block) read."""
        piece = np.searchsorted(self._starts, ids, side="right") - 1
        key = piece if block is None else np.asarray(block, dtype=np.int64) * len(self._starts) + piece
        uniq, first = np.unique(key, return_index=True)
        _, last_rev = np.unique(key[::-1], return_index=True)
        last = len(key) - 1 - last_rev
        made = []
        for u in np.argsort(first, kind="stable").tolist():
            k = int(piece[first[u]])
            src = self._sources.get(int(self._pieces.shard[k]))
            if src is None:
                continue
            plain = src.plain
            if not self._pieces.whole[k]:
                size = int(self._pieces.hi[k] - self._pieces.lo[k])
            else:
                size = src.info.size if plain is None else plain.size or src.info.size
            made.append(_Held(k, j0 + int(last[u]), size, plain))
        return made

    # ----- downloads -----------------------------------------------------------------
    def _pump(self) -> None:
        """Start downloads in order of first use while they fit the budget, making the
        holds of the next chunks as the downloads reach them."""
        while True:
            with self._lock:
                while self._queue and (self._queue[0].started or self._queue[0].dropped):
                    self._queue.popleft()
                if self._stop.is_set():
                    return
                held = self._queue[0] if self._queue else None
                if held is not None and self._holding and self._holding + held.size > self.budget:
                    return
                # far enough: a lookahead of positions, or as many holds as shards (the
                # descriptors of a whole-epoch order's holds)
                far = (self._frontier >= self._done + max(self._ahead, _MAKE_AHEAD)
                       or len(self._live) >= self._streamed)
            if held is None:
                if far or not self._make():
                    return
                continue
            self._start(held)

    def _start(self, held: _Held) -> None:
        with self._lock:
            if held.started:
                return
            held.started = True
            if not held.dropped:
                self._holding += held.size
        try:
            self._pool.post(self._fetch, held)
        except ExecutorClosed:
            held.ready.set()

    def _fetch(self, held: _Held) -> None:
        src = self._sources[int(self._pieces.shard[held.k])]
        whole = bool(self._pieces.whole[held.k])
        lo, hi = int(self._pieces.lo[held.k]), int(self._pieces.hi[held.k])
        try:
            if held.plain is not None:
                # made now, in its block's turn, and pinned until released; room held by
                # other ranks of the node frees as they finish their block
                held.plain.hold(_PLAIN_WAIT_S, self._stop)
                return
            waited = time.monotonic()
            never = held.size > self.budget  # no wait can make room (refused when asked, layout.py)
            while not self._stop.is_set():
                fd = self._shards.pinned_copy(src.info) if whole else self._shards.pinned_piece(src.info, lo, hi)
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
            what = src.path if whole else f"{src.path} (bytes {lo}-{hi - 1})"
            log.warning("turbofeed: streaming download of %s failed, reading its samples without it: %s",
                        what, exc)
        finally:
            with self._lock:
                held.ready.set()
                unused = self._stop.is_set() or held.dropped
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
                  order: np.ndarray | RoundsRankOrder, concurrency: int, ahead: int = 4096,
                  blocks: np.ndarray | None = None, pieces: Pieces | None = None) -> ShardStream:
    """The :class:`ShardStream` of a rank reading ``order`` (global sample ids: an array, or
    a resampled epoch's lazy order, read round by round) of a dataset whose shard ``k``
    holds ids ``starts[k] .. starts[k+1]-1``; ``ahead``: positions a read may be ahead of
    the last batch done; ``blocks``: an array order's block of each position (a shard is
    held per block that reads it; without, from its first use to its last); ``pieces``:
    the pieces the order's units are (None: whole shards)."""
    chunks: Iterable[Chunk] = [(0, np.asarray(order), blocks)] if isinstance(order, np.ndarray) else order.chunks()
    stream = ShardStream(shards, sources, starts, chunks, budget=shards.cache.max_bytes, concurrency=concurrency,
                         ahead=ahead, pieces=pieces)
    shards.streamer = stream  # reads go through it; the whole-dataset prefetch stops
    return stream
