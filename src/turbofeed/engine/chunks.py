"""decode.cpu per chunk: Python once per chunk of samples, native work per sample.

The per-sample path (:class:`~turbofeed.engine.stages.FusedCpuDecode`) runs about 50 us
of Python per sample holding the GIL (fetch, index lookup, the crop window's draws, the
policy, timers, the slot write); one interpreter lock serialises it, so a process stops
near 7k images/s whatever its cores (bench/emulated_cores.py). Here a worker task takes
a chunk of 32-64 positions of a batch and does, with a fixed number of Python and NumPy
operations whatever the chunk's size:

1. the chunk's sample ids from the plan's order, and where they lie on disk (the
   dataset's arrays by sample id: :class:`~turbofeed.io.local.ranges.SampleRanges`);
2. every sample read (``pread``) and checked against its shard's identity, its JPEG header
   read, its crop window chosen from its size and the counter-based draws of (seed,
   epoch, id) (the windows the per-sample path draws, to the bit:
   :mod:`turbofeed.transforms.program`), decoded, resized, flipped and normalised into
   its row of the slot, its whole scan checked where it is not known intact
   (:mod:`turbofeed.engine.checked`: the dataset index's verdicts, then this process's);
3. labels, ids and the checked flags set, the stage times added once for the chunk.

Steps 1-3 are one native call without the GIL
(:func:`~turbofeed.decode.native.run_chunk_at`), so a chunk costs a fixed dozen Python
operations (with the batch's own, 4-4.5 us of Python a sample on this machine:
bench/RESULTS.md). Where that call
cannot gather a chunk (samples known bad in this pass, a shard not open yet, more shards
than descriptors kept open, an order computed lazily), step 1 runs in NumPy first
(:meth:`ChunkReader.select <turbofeed.engine.chunk_reads.ChunkReader.select>`, :meth:`SampleRanges.files
<turbofeed.io.local.ranges.SampleRanges.files>`) and steps 2-3 are
:func:`~turbofeed.decode.native.run_chunk` and NumPy (:meth:`ChunkedCpuDecode.fill_rows`).

The GPU path's feeding threads do steps 1-2 without the decode, likewise in one native
call (:meth:`ChunkReader.read <turbofeed.engine.chunk_reads.ChunkReader.read>`, :func:`~turbofeed.decode.native.read_chunk_at`: the
bytes into one buffer for the consumer's batched decode, the headers read, the scans
checked and flagged; step 1 in NumPy where the CPU path's is), then the chunk's windows
(:class:`~turbofeed.engine.gpu_chunks.ChunkedGpuDecode`).

A position the chunk cannot finish (a sample known bad in this pass, one the dataset
cannot read by byte range, a PNG or CMYK JPEG, damage, an image over the pixel limit)
goes through the per-sample path, which applies the bad-sample policy and names the
error exactly as before: the policy's Python runs only for the failures. A shard that
changed or failed to read raises :class:`~turbofeed.errors.StorageError` (not bad data).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..decode import native
from ..plan import EpochPlan
from ..transforms.draws import epoch_key
from .chunk_reads import ChunkOptions, ChunkReader
from .policy import PassPolicy
from .slots import Slot, SlotPool
from .stages import FusedCpuDecode
from .work import SampleWork

if TYPE_CHECKING:
    from .stream import Job

#: Chunk sizes: at least this many positions (a chunk's Python, 60-100 us on a slow
#: core, is then under 3 us a sample, against a decode of about 1.5 ms), at most this
#: many (a batch still spreads over the threads; the stream keeps enough batches in
#: flight for a chunk per thread).
MIN_CHUNK, MAX_CHUNK = 32, 64


def chunk_size(batch_size: int, num_workers: int) -> int:
    """Positions per chunk: about one chunk per worker thread per batch, within
    ``MIN_CHUNK .. MAX_CHUNK`` (a 256-sample batch: 32 on 8 threads or more, 64 on 2)."""
    per_thread = math.ceil(batch_size / max(1, num_workers))
    return max(1, min(batch_size, MAX_CHUNK, max(MIN_CHUNK, per_thread)))


def chunked(work: SampleWork, *, output: bool = False) -> bool:
    """Whether a pass of ``work`` can feed its decode per chunk: the native decoder is
    on, the transform's windows have a native form (:mod:`turbofeed.transforms.program`:
    Resize, CenterCrop, RandomResizedCrop, flips), no EXIF orientation (turned per
    sample) and the image is the table's own member (no ``fields=`` picking another);
    with ``output`` (the native decode writes the slot), uint8 or float32 output."""
    transform = work.transform
    if not work.native or transform is None or work.orient or work.image_exts is not None:
        return False
    if transform.program is None:
        return False
    spec = transform.output
    return not output or spec is None or spec.dtype == np.float32


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
        self.info = replace(FusedCpuDecode.info, per_task=chunk, chunked=True)
        self.reader = ChunkReader(work, plan, policy)
        self.labels = work.dataset.labels
        assert work.transform is not None and work.transform.program is not None  # chunked() said so
        self.program = work.transform.program
        self.epoch_key = epoch_key(work.seed, work.epoch)
        spec = work.transform.output
        self.options = ChunkOptions(channels_first=channels_first, max_pixels=work.max_pixels,
                                    offset=None if spec is None else spec.offset,
                                    factor=None if spec is None else spec.factor)

    def fill_chunk(self, job: Job, start: int, stop: int) -> list[int]:
        """Fill positions ``start .. stop - 1`` of ``job``; returns the positions left
        for the per-sample path (every other one is filled: slot row, label, ``job.ids``).

        The usual chunk is one native call that also does its bookkeeping
        (:func:`~turbofeed.decode.native.run_chunk_at`: a fixed number of Python
        operations, whatever the chunk's size); with samples known bad in this pass, or
        where descriptors may be let go or the order is computed lazily, the chunk's ids
        and reads are selected here first (:meth:`fill_rows`).

        Raises:
            StorageError: a shard vanished, changed or failed to read.
        """
        reader = self.reader
        if reader.table is None or reader.policy.any_bad():
            js, gids, left = reader.select(job, start, stop)
            return sorted(left + self.fill_rows(job, js, gids))
        started = time.perf_counter()
        at = job.positions[start:stop]
        slot: Slot = job.slot
        codes, reading, nbytes = native.run_chunk_at(reader.order, at.start, at.step, len(at), start, reader.table,
                                                     self.program, self.epoch_key, slot.images, slot.labels,
                                                     job.ids, **self.options)
        if codes is not None:
            return self.failures(job, start, at, codes, (started, reading, nbytes))
        self.work.stats.add_chunk(reading, time.perf_counter() - started - reading, nbytes)
        return []

    def failures(self, job: Job, start: int, at: range, codes: np.ndarray,
                 spent: tuple[float, float, int]) -> list[int]:
        """After :meth:`fill_chunk`'s native call (``codes``; ``spent``: when it started,
        its seconds reading and bytes read): raise its storage fault, or run its rows
        whose shard was not open yet again through :meth:`fill_rows` (which opens it);
        the positions left for the per-sample path. The chunk's times are added once."""
        status = codes[:, 0]
        gids = self.reader.order[at.start:at.stop:at.step]
        self.check_codes(status, codes[:, 1], gids)
        rows = np.flatnonzero(status == native.RUN_UNOPENED)
        left = (start + np.flatnonzero(status == native.RUN_GENERAL)).tolist()
        if len(rows):
            left += self.fill_rows(job, start + rows, np.ascontiguousarray(gids[rows], np.int64), spent)
        else:
            started, reading, nbytes = spent
            self.work.stats.add_chunk(reading, time.perf_counter() - started - reading, nbytes)
        return sorted(left)

    def check_codes(self, status: np.ndarray, errnos: np.ndarray, gids: np.ndarray) -> None:
        """Raise what a native chunk call's codes say past bad data: the first storage
        fault (:meth:`ChunkReader.check_reads
        <turbofeed.engine.chunk_reads.ChunkReader.check_reads>`), or no memory.

        Raises:
            StorageError: a shard vanished, changed or failed to read.
            MemoryError: the decoder ran out of memory.
        """
        self.reader.check_reads(status, errnos, gids)
        if (status == native.RUN_NOMEM).any():
            raise MemoryError("turbofeed: out of memory decoding a chunk")

    def fill_rows(self, job: Job, js: np.ndarray, gids: np.ndarray,
                  spent: tuple[float, float, int] | None = None) -> list[int]:
        """Fill positions ``js`` of ``job`` with samples ``gids`` (each readable by range):
        their reads selected here (:meth:`SampleRanges.files
        <turbofeed.io.local.ranges.SampleRanges.files>`, opening shards), then one native
        call, then labels, ids and checked flags set; returns the positions of ``js``
        left for the per-sample path. ``spent``: the chunk's native call before this one
        (:meth:`failures`), whose time and bytes this one's stage times include.

        Raises:
            StorageError: a shard vanished, changed or failed to read.
        """
        started, read_before, bytes_before = spent or (time.perf_counter(), 0.0, 0)
        reader = self.reader
        files = reader.ranges.files(gids)
        slot: Slot = job.slot
        codes, reading = native.run_chunk(files.fds, files.offsets, files.sizes, files.stamps, gids,
                                          ~reader.checked[gids], js, self.program, self.epoch_key, slot.images,
                                          **self.options)
        del files.held[:]  # reads done: the descriptors may be let go
        status = codes[:, 0]
        left: list[int] = []
        if status.any():
            self.check_codes(status, codes[:, 1], gids)
            done = status == native.RUN_OK
            left = js[~done].tolist()
            js, gids = js[done], gids[done]
        slot.labels[js] = self.labels[gids]
        job.ids[js] = gids
        reader.checked[gids] = True  # decoded with their whole scan checked, or checked before
        reading += read_before
        self.work.stats.add_chunk(reading, time.perf_counter() - started - reading,
                                  int(files.sizes.sum()) + bytes_before)
        return left
