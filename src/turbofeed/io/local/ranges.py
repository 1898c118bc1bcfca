"""Where a chunk of samples lies on disk, as arrays: the hot path's reads without Python
per sample.

The per-sample path reads a sample with :meth:`Source.read` (a few microseconds of
Python holding the GIL). A chunk of samples whose sources declare ``ranges`` (plain
local tar shards: :class:`~turbofeed.io.Source`) is instead described by arrays, one
entry per sample: the descriptor of its shard, the byte offset and size of its image and
the identity stamp every read is checked against. One native call then reads (``pread``)
and checks them all without the GIL (:func:`turbofeed.decode.native.read_chunk`): the
same checks as :meth:`ShardFiles.pread_exact`, so a shard replaced, rewritten or
truncated during a pass is a :class:`~turbofeed.errors.StorageError` here too.

Descriptors are opened on first use and kept, at most ``max_open`` (then the ones not
in use by the chunk asking are let go). Where some may be let go (more sources than
``max_open``), a chunk holds the :class:`OpenFile` objects of its shards while it reads,
so a descriptor is never closed (and its number reused) under a reader; with fewer, a
chunk whose files are all open takes their descriptors without a lock.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .files import FileRef, OpenFile

if TYPE_CHECKING:
    from ..source import Source


class ChunkFiles(NamedTuple):
    """A chunk's reads: per sample the descriptor (int32), offset, size (int64) and the
    identity stamp ``(size, mtime_ns, ctime_ns)`` (int64, n x 3) of its shard; ``source``
    (int32, the index of each sample's source in the dataset); ``held``: the open files,
    to keep referenced until the reads are done."""

    fds: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    stamps: np.ndarray
    source: np.ndarray
    held: list[OpenFile]


class SampleRanges:
    """The byte ranges of every sample of a dataset's ``ranges`` sources, by global id.

    Args:
        sources: the dataset's sources, in order.
        starts: global id of each source's first sample (``len(sources) + 1`` entries).
        bad: global ids read through the per-sample path whatever their source (samples
            the dataset knows are bad: their error is named there).
        max_open: descriptors kept open at most.

    Attributes:
        readable: bool per global id: its image is a byte range of a local file.
        source: int32 per global id: the index of its source.
    """

    def __init__(self, sources: list[Source], starts: np.ndarray, bad: dict[int, str] | list[int],
                 *, max_open: int = 256) -> None:
        n = int(starts[-1])
        self.starts = np.asarray(starts, np.int64)
        self.readable = np.zeros(n, dtype=bool)
        self.offsets = np.zeros(n, dtype=np.int64)
        self.sizes = np.zeros(n, dtype=np.int64)
        self.stamps = np.zeros((len(sources), 3), dtype=np.int64)
        # each sample's source: one index per chunk, where a search of ``starts`` took two calls
        self.source = np.repeat(np.arange(len(sources), dtype=np.int32), np.diff(self.starts))
        self._refs: list[FileRef | None] = []
        for k, source in enumerate(sources):
            ref = source.file if source.ranges else None
            self._refs.append(ref)
            if ref is None:
                continue
            lo, hi = int(starts[k]), int(starts[k + 1])
            self.readable[lo:hi] = True
            self.offsets[lo:hi] = source.table.offsets
            self.sizes[lo:hi] = source.table.sizes
            self.stamps[k] = ref.stamp
        if len(bad):
            self.readable[np.fromiter(bad, np.int64, len(bad))] = False
        self._fds = np.full(len(sources), -1, dtype=np.int32)
        self._open: dict[int, OpenFile] = {}  # insertion order: the oldest first
        self._max_open = max(1, max_open)
        self._keeps_all = len(sources) <= self._max_open  # every file stays open once opened
        self._lock = threading.Lock()

    @property
    def keeps_open(self) -> bool:
        """Every descriptor stays open once opened (no more sources than ``max_open``): a
        reader may then take :meth:`arrays`' descriptors without a hold or a lock."""
        return self._keeps_all

    def arrays(self) -> tuple[np.ndarray, ...]:
        """``(readable, source, fds, offsets, sizes, stamps)`` as a native chunk call reads
        them (:func:`turbofeed.decode.native.run_chunk_at`): ``readable`` as uint8, by
        sample id; ``fds`` (-1: not open yet) and ``stamps`` by source. Views, not
        copies: a descriptor opened later shows in ``fds``. Only where :attr:`keeps_open`
        (else a descriptor could be closed, and its number reused, under a reader)."""
        if not self._keeps_all:
            raise RuntimeError("SampleRanges.arrays: some descriptors may be let go; read through files()")
        return self.readable.view(np.uint8), self.source, self._fds, self.offsets, self.sizes, self.stamps

    def files(self, gids: np.ndarray) -> ChunkFiles:
        """The reads of samples ``gids`` (each ``readable``).

        Raises:
            StorageError: a shard vanished or is not the indexed version any more.
        """
        source = self.source[gids]
        fds = self._fds[source]
        if self._keeps_all and (fds >= 0).all():  # nothing is ever let go: no hold, no lock
            return ChunkFiles(fds, self.offsets[gids], self.sizes[gids], self.stamps[source], source, [])
        needed = np.unique(source)
        with self._lock:
            missing = needed[self._fds[needed] < 0]
            for k in missing.tolist():
                self._open_source(k, needed)
            held = [self._open[k] for k in needed.tolist()]
            fds = self._fds[source]
        return ChunkFiles(fds, self.offsets[gids], self.sizes[gids], self.stamps[source], source, held)

    def _open_source(self, k: int, needed: np.ndarray) -> None:
        if len(self._open) >= self._max_open:  # let go of the oldest not needed now
            for old in list(self._open):
                if len(self._open) < self._max_open:
                    break
                if old not in needed:
                    del self._open[old]  # closed once no chunk holds it
                    self._fds[old] = -1
        ref = self._refs[k]
        assert ref is not None  # only readable samples are asked for
        file = self._open[k] = OpenFile(ref)
        self._fds[k] = file.fd

    def ref(self, k: int) -> FileRef:
        """The file of source ``k`` (for messages)."""
        ref = self._refs[k]
        assert ref is not None
        return ref
