"""decode.cpu per chunk: Python once per chunk of samples, native work per sample.

The per-sample path (:class:`~turbofeed.engine.stages.FusedCpuDecode`) runs about 50 us
of Python per sample holding the GIL (fetch, index lookup, the crop window's draws, the
policy, timers, the slot write); one interpreter lock serialises it, so a process stops
near 7k images/s whatever its cores (bench/emulated_cores.py). Here a worker task takes
a chunk of 16-64 positions of a batch and does, with a fixed number of Python and NumPy
operations whatever the chunk's size:

1. the chunk's sample ids from the plan, and where they lie on disk
   (:class:`~turbofeed.io.local.ranges.SampleRanges`);
2. one native call without the GIL: every sample read (``pread``), checked against
   its shard's identity, and its JPEG header read (:func:`~turbofeed.decode.native.read_chunk`);
3. every crop window from the sizes and the counter-based draws of (seed, epoch, id)
   (:meth:`~turbofeed.engine.work.SampleWork.windows`: the same windows the per-sample
   path draws);
4. one native call without the GIL: every window decoded, resized, flipped and
   normalised into its row of the slot, its whole scan checked where it was never
   checked intact (:func:`~turbofeed.decode.native.decode_chunk`);
5. labels, ids, the checked flags and the stage times set for the chunk at once.

A position the chunk cannot finish (a sample known bad in this pass, one the dataset
cannot read by byte range, a PNG or CMYK JPEG, damage, an image over the pixel limit)
goes through the per-sample path, which applies the bad-sample policy and names the
error exactly as before: the policy's Python runs only for the failures. A shard that
changed or failed to read raises :class:`~turbofeed.errors.StorageError` (not bad data).
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..decode import native
from ..errors import StorageError
from ..io.local.files import what_changed
from ..io.local.ranges import ChunkFiles
from ..plan import EpochPlan
from .checked import CHECKED
from .policy import PassPolicy
from .slots import Slot, SlotPool
from .stages import FusedCpuDecode, StageInfo
from .work import SampleWork

if TYPE_CHECKING:
    from .stream import Job

#: Chunk sizes: at least this many positions (so a chunk's Python, about 100 us, stays a
#: small share of its decode time, about 1.5 ms a sample), at most this many (so a
#: batch still spreads over the threads).
MIN_CHUNK, MAX_CHUNK = 16, 64

_buffers = threading.local()  # each worker thread's read buffer, reused across chunks


def chunk_size(batch_size: int, num_workers: int) -> int:
    """Positions per chunk: about one chunk per worker thread per batch, within
    ``MIN_CHUNK .. MAX_CHUNK`` (a 256-sample batch: 16 on 16 threads, 64 on 2)."""
    per_thread = math.ceil(batch_size / max(1, num_workers))
    return max(1, min(batch_size, MAX_CHUNK, max(MIN_CHUNK, per_thread)))


def chunked(work: SampleWork, *, output: bool = False) -> bool:
    """Whether a pass of ``work`` can feed its decode per chunk: the native decoder is
    on, the transform's windows have an array form, no EXIF orientation (turned per
    sample) and the image is the table's own member (no ``fields=`` picking another);
    with ``output`` (the native decode writes the slot), uint8 or float32 output."""
    transform = work.transform
    if not work.native or transform is None or work.orient or work.image_exts is not None:
        return False
    if not transform.vectorized:
        return False
    spec = transform.output
    return not output or spec is None or spec.dtype == np.float32


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

    def read(self, job: Job, start: int, stop: int, *, fresh: bool = False, check: bool = False) -> Chunk:
        """Read positions ``start .. stop - 1`` of ``job``.

        Args:
            fresh: read into a new buffer (the bytes outlive this call: the GPU path hands
                them to the consumer), not this thread's reused one.
            check: check the scans never checked intact, and the pixel limit, in the read
                (:data:`~turbofeed.decode.native.READ_BAD`; those found intact are marked).

        Raises:
            StorageError: a shard vanished, changed or failed to read.
        """
        started = time.perf_counter()
        js = np.arange(start, stop)
        positions = np.asarray(job.positions[start:stop])
        gids = np.asarray(self.plan.order[positions], dtype=np.int64)
        go = self.ranges.readable[gids]
        if self.policy.any_bad():
            go &= ~self.policy.known_bad(positions, gids)
        left = js[~go].tolist()
        js, gids = js[go], gids[go]
        files = self.ranges.files(gids)
        starts = np.zeros(len(gids), dtype=np.int64)
        np.cumsum(files.sizes[:-1], out=starts[1:])
        total = int(files.sizes.sum())
        buffer = np.empty(total, np.uint8) if fresh else _buffer(total)
        checks = ~self.checked[gids] if check else None
        head = native.read_chunk(files.fds, files.offsets, files.sizes, files.stamps, buffer, starts, checks=checks,
                                 max_pixels=self.work.max_pixels if check else None)
        del files.held[:]  # reads done: the descriptors may be let go
        status = head[:, 0]
        if (status >= native.READ_CHANGED).any():
            raise self._storage_error(head, files)
        if checks is not None:
            self.checked[gids[checks & (status == native.READ_OK)]] = True
        self.work.stats.add_fetch(time.perf_counter() - started, total)
        return Chunk(js, gids, buffer, starts, files.sizes, status, head[:, 1], head[:, 2], left)

    def _storage_error(self, head: np.ndarray, files: ChunkFiles) -> StorageError:
        """The error of the chunk's first sample whose read failed or whose shard changed."""
        i = int(np.flatnonzero(head[:, 0] >= native.READ_CHANGED)[0])
        ref = self.ranges.ref(int(files.source[i]))
        status, offset, size = int(head[i, 0]), int(files.offsets[i]), int(files.sizes[i])
        if status == native.READ_CHANGED:
            return StorageError(ref.path, what_changed(ref))
        if status == native.READ_ERRNO:
            return StorageError(ref.path, f"read of {size} bytes at offset {offset} failed: "
                                          f"{os.strerror(int(head[i, 1]))}")
        return StorageError(ref.path, f"short read of {size} bytes at offset {offset}")


class ChunkedCpuDecode(FusedCpuDecode):
    """decode.cpu per chunk of positions (the module docstring); the per-sample
    :meth:`fill` of :class:`FusedCpuDecode` stays for the positions a chunk leaves.

    Args:
        work: the pass's sample work (dataset, transform, seed, epoch, stats).
        pool: the batch slots.
        channels_first: CHW rows (else HWC).
        plan: the pass's plan (positions -> sample ids).
        policy: the pass's bad-sample policy (positions known bad skip the chunk).
        chunk: positions per chunk (:func:`chunk_size`).
    """

    def __init__(self, work: SampleWork, pool: SlotPool, *, channels_first: bool, plan: EpochPlan,
                 policy: PassPolicy, chunk: int) -> None:
        super().__init__(work, pool, channels_first=channels_first)
        self.info = StageInfo("decode.cpu", "sample", FusedCpuDecode.info.counts, per_task=chunk, chunked=True)
        self.reader = ChunkReader(work, plan, policy)
        self.labels = work.dataset.labels
        spec = work.transform.output if work.transform is not None else None
        self.offset = None if spec is None else spec.offset
        self.factor = None if spec is None else spec.factor

    def fill_chunk(self, job: Job, start: int, stop: int) -> list[int]:
        """Fill positions ``start .. stop - 1`` of ``job``; returns the positions left
        for the per-sample path (every other one is filled: slot row, label, ``job.ids``).

        Raises:
            StorageError: a shard vanished, changed or failed to read.
        """
        chunk = self.reader.read(job, start, stop)
        started = time.perf_counter()
        ok = chunk.ok()
        windows = self.work.windows(chunk.gids[ok], chunk.heights[ok], chunk.widths[ok])
        slot: Slot = job.slot
        images = slot.images
        size = images.shape[2:] if self.channels_first else images.shape[1:3]
        fits = (windows.height == size[0]) & (windows.width == size[1])
        take = np.flatnonzero(ok)[fits]
        gids = chunk.gids
        codes = native.decode_chunk(chunk.buffer, chunk.starts[take], chunk.sizes[take], windows.boxes[fits],
                                    windows.flips[fits], ~self.reader.checked[gids[take]], chunk.js[take], images,
                                    channels_first=self.channels_first, offset=self.offset, factor=self.factor,
                                    max_pixels=self.work.max_pixels)
        if (codes == native.RC_NOMEM).any():
            raise MemoryError("turbofeed: out of memory decoding a chunk")
        done = take[codes == native.RC_OK]
        rows, ids = chunk.js[done], gids[done]
        slot.labels[rows] = self.labels[ids]
        job.ids[rows] = ids
        self.reader.checked[ids] = True  # decoded with their whole scan checked, or checked before
        self.work.stats.add_times(decode_cpu=time.perf_counter() - started)
        failed = np.ones(len(gids), dtype=bool)
        failed[done] = False
        return sorted(chunk.left + chunk.js[failed].tolist())


def _buffer(nbytes: int) -> np.ndarray:
    """This thread's read buffer, at least ``nbytes`` long (grown by doubling)."""
    buffer = getattr(_buffers, "array", None)
    if buffer is None or len(buffer) < nbytes:
        buffer = _buffers.array = np.empty(max(nbytes, 2 * (0 if buffer is None else len(buffer)), 1 << 20), np.uint8)
    return buffer


