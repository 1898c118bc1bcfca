"""The reading half of a pass per chunk (:mod:`turbofeed.engine.chunks`): a chunk's
positions -> sample ids -> bytes and headers, in one native call.

:class:`ChunkReader` keeps what a pass's chunks read from (the plan's order, the
dataset's arrays by sample id, the checked flags, the reused byte buffers); the CPU
decode (:class:`~turbofeed.engine.chunks.ChunkedCpuDecode`) hands its arrays to the one
native call that reads and decodes, the GPU feeding path
(:class:`~turbofeed.engine.gpu_chunks.ChunkedGpuDecode`) reads a chunk into a buffer
with :meth:`ChunkReader.read` (:class:`Chunk`). A shard that changed or failed to read
is a :class:`~turbofeed.errors.StorageError` naming it (:meth:`ChunkReader.storage_error`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from ..decode import native
from ..errors import StorageError
from ..io.local.files import what_changed
from ..plan import EpochPlan
from .byte_buffers import ByteBuffers
from .checked import CHECKED
from .policy import PassPolicy
from .work import SampleWork

if TYPE_CHECKING:
    from .stream import Job

#: :meth:`ChunkReader.read`'s first buffer: this many times a chunk of mean samples
HEADROOM = 1.25


class ChunkOptions(TypedDict):
    """The native chunk calls' keyword arguments fixed for a pass (its output)."""

    channels_first: bool
    max_pixels: int | None
    offset: np.ndarray | None
    factor: np.ndarray | None


@dataclass
class Chunk:
    """A chunk's samples once read (:meth:`ChunkReader.read`), row ``i`` for position
    ``js[i]`` of the job: sample ``gids[i]``, its bytes ``buffer[starts[i]:starts[i] +
    sizes[i]]``, its read ``status`` (:func:`~turbofeed.decode.native.read_chunk`) and
    header size; ``left``: positions left to the per-sample path before any read."""

    js: np.ndarray
    gids: np.ndarray
    buffer: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    status: np.ndarray
    heights: np.ndarray
    widths: np.ndarray
    left: list[int]

    def ok(self) -> np.ndarray:
        """Rows read as JPEGs the native decoders take."""
        return self.status == native.READ_OK


class ChunkReader:
    """Steps 1-2 of the module docstring for one pass: a chunk's positions -> sample ids
    -> bytes and headers, in one native call.

    Args:
        work: the pass's sample work (its dataset, stats, pixel limit).
        plan, policy: the pass's plan and bad-sample policy (positions known bad in this
            pass are left to the per-sample path, which does not try them again).
    """

    def __init__(self, work: SampleWork, plan: EpochPlan, policy: PassPolicy) -> None:
        self.work = work
        self.plan = plan
        self.policy = policy
        self.ranges = work.dataset.ranges()  # made here, in the consumer's thread, once
        self.checked = CHECKED.flags(work.dataset)
        self.buffers = ByteBuffers()  # what read() reads into
        #: read()'s buffer size: the bytes of the largest chunk read so far, at first a
        #: guess from the mean sample (then rarely does a chunk need a second call)
        self.largest = 0
        # What a chunk's one native call reads (run_chunk_at, read_chunk_at): the order (a
        # rank's strided view copied once a pass) and the dataset's arrays by sample id,
        # views kept current; None where descriptors may be let go or the order is lazy.
        self.table: tuple[np.ndarray, ...] | None = None
        self.order = np.empty(0, np.int64)
        if self.ranges.keeps_open and isinstance(plan.order, np.ndarray):
            self.order = np.ascontiguousarray(plan.order, np.int64)
            self.table = (*self.ranges.arrays(), self.checked.view(np.uint8),
                          np.ascontiguousarray(work.dataset.labels, np.int64))

    def select(self, job: Job, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """``(js, gids, left)`` of positions ``start .. stop - 1`` of ``job``: the positions
        a chunk reads and their sample ids, and the positions left to the per-sample path
        (known bad in this pass, or not a byte range of a local file)."""
        js = np.arange(start, stop)
        # a range: the plan's order is sliced, not indexed (and copied where it is a
        # rank's strided view: the native calls take contiguous arrays)
        at = job.positions[start:stop]
        gids = np.ascontiguousarray(self.plan.order[at.start:at.stop:at.step], dtype=np.int64)
        go = self.ranges.readable[gids]
        if self.policy.any_bad():
            go &= ~self.policy.known_bad(np.arange(at.start, at.stop, at.step), gids)
        if go.all():
            return js, gids, []
        return js[go], gids[go], js[~go].tolist()

    def read(self, job: Job, start: int, stop: int) -> Chunk:
        """Read positions ``start .. stop - 1`` of ``job`` into a buffer of
        ``self.buffers`` (the bytes outlive this call: the GPU path hands them to the
        consumer, and gives the buffer back once the decoder took them), check the scans
        never checked intact (then marked) and the pixel limit
        (:data:`~turbofeed.decode.native.READ_BAD`).

        The usual chunk is one native call that also does its bookkeeping
        (:func:`~turbofeed.decode.native.read_chunk_at`: a fixed number of Python
        operations, whatever the chunk's size), into a buffer the size of the largest
        chunk so far (a larger chunk: a buffer of its size, and the call again); its
        rows not readable by range are :data:`~turbofeed.decode.native.READ_GENERAL`
        (for the per-sample path) and those whose shard was not open are read at their
        places by :meth:`read_unopened`. With samples known bad in this pass, or where
        descriptors may be let go or the order is computed lazily, the chunk's ids and
        reads are selected here first (:meth:`read_selected`).

        Raises:
            StorageError: a shard vanished, changed or failed to read.
        """
        if self.table is None or self.policy.any_bad():
            return self.read_selected(job, start, stop)
        started = time.perf_counter()
        at = job.positions[start:stop]
        if not self.largest:
            self.largest = int(HEADROOM * len(at) * self.ranges.sizes.mean()) if len(self.ranges.sizes) else 0
        buffer = self.buffers.take(self.largest)
        head, place, total = native.read_chunk_at(self.order, at.start, at.step, len(at), self.table, buffer,
                                                  max_pixels=self.work.max_pixels)
        if head is None:  # larger than any chunk before: a buffer of its size (the layout is the same)
            self.buffers.give([buffer])
            self.largest = max(self.largest, total)
            buffer = self.buffers.take(total)
            head, place, total = native.read_chunk_at(self.order, at.start, at.step, len(at), self.table, buffer,
                                                      max_pixels=self.work.max_pixels)
            assert head is not None
        buffer = buffer[:total]
        if (head[:, 0] >= native.READ_CHANGED).any():  # a storage fault, or a shard not open yet
            head = self.read_unopened(head, place, buffer)
        self.work.stats.add_fetch(time.perf_counter() - started, total)
        return Chunk(np.arange(start, stop), place[:, 0], buffer, place[:, 1], place[:, 2], head[:, 0], head[:, 1],
                     head[:, 2], [])

    def read_unopened(self, head: np.ndarray, place: np.ndarray, buffer: np.ndarray) -> np.ndarray:
        """After :meth:`read`'s native call: its rows whose shard was not open read at their
        places of ``buffer`` (:meth:`SampleRanges.files
        <turbofeed.io.local.ranges.SampleRanges.files>` opens it), as
        :meth:`read_selected` reads them; the chunk's heads.

        Raises:
            StorageError: the chunk's first row whose shard vanished, changed or failed to read.
        """
        head = head.copy()
        status = head[:, 0]
        rows = np.flatnonzero(status == native.RUN_UNOPENED)
        if len(rows):
            gids = place[rows, 0]
            files = self.ranges.files(gids)
            checks = ~self.checked[gids]
            head[rows] = native.read_chunk(files.fds, files.offsets, files.sizes, files.stamps, buffer,
                                           place[rows, 1], checks=checks, max_pixels=self.work.max_pixels)
            del files.held[:]  # reads done: the descriptors may be let go
            self.checked[gids[checks & (status[rows] == native.READ_OK)]] = True
        self.check_reads(status, head[:, 1], place[:, 0])
        return head

    def read_selected(self, job: Job, start: int, stop: int) -> Chunk:
        """:meth:`read` with the chunk's ids and reads selected in NumPy (:meth:`select`,
        :meth:`SampleRanges.files <turbofeed.io.local.ranges.SampleRanges.files>`), then
        one native call (:func:`~turbofeed.decode.native.read_chunk`).

        Raises:
            StorageError: a shard vanished, changed or failed to read.
        """
        started = time.perf_counter()
        js, gids, left = self.select(job, start, stop)
        files = self.ranges.files(gids)
        starts = np.zeros(len(gids), dtype=np.int64)
        np.cumsum(files.sizes[:-1], out=starts[1:])
        total = int(files.sizes.sum())
        buffer = self.buffers.take(total)
        checks = ~self.checked[gids]
        head = native.read_chunk(files.fds, files.offsets, files.sizes, files.stamps, buffer, starts, checks=checks,
                                 max_pixels=self.work.max_pixels)
        del files.held[:]  # reads done: the descriptors may be let go
        status = head[:, 0]
        self.check_reads(status, head[:, 1], gids)
        self.checked[gids[checks & (status == native.READ_OK)]] = True
        self.work.stats.add_fetch(time.perf_counter() - started, total)
        return Chunk(js, gids, buffer, starts, files.sizes, status, head[:, 1], head[:, 2], left)

    def check_reads(self, status: np.ndarray, errnos: np.ndarray, gids: np.ndarray) -> None:
        """Raise the storage fault of the chunk's first sample (``gids[i]``) whose read
        failed (``errnos[i]``, where ``status[i]`` says
        :data:`~turbofeed.decode.native.READ_ERRNO`), came up short or whose shard
        changed, if one did: the codes of every native chunk call agree on these.

        Raises:
            StorageError: naming the shard.
        """
        faults = np.flatnonzero((status >= native.READ_CHANGED) & (status <= native.READ_SHORT))
        if len(faults):
            raise self.storage_error(int(faults[0]), status, errnos, gids)

    def storage_error(self, i: int, status: np.ndarray, errnos: np.ndarray, gids: np.ndarray) -> StorageError:
        """The error of the chunk's sample ``gids[i]``, whose ``status[i]`` is a storage fault."""
        gid = int(gids[i])
        ranges = self.ranges
        ref = ranges.ref(int(ranges.source[gid]))
        code, offset, size = int(status[i]), int(ranges.offsets[gid]), int(ranges.sizes[gid])
        if code == native.READ_CHANGED:
            return StorageError(ref.path, what_changed(ref))
        if code == native.READ_ERRNO:
            return StorageError(ref.path, f"read of {size} bytes at offset {offset} failed: "
                                          f"{os.strerror(int(errnos[i]))}")
        return StorageError(ref.path, f"short read of {size} bytes at offset {offset}")


