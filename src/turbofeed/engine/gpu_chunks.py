"""decode.gpu per chunk: the feeding threads and the batch's own thread each run a fixed
number of Python operations per chunk or batch, not per image.

A feeding thread's task is a chunk of positions (:class:`ChunkedGpuDecode.fill_chunk`):
one native call takes the chunk's sample ids from the plan's order and reads their bytes
into one reused host buffer
(:class:`~turbofeed.engine.byte_buffers.ByteBuffers`: given back once the decoder took
the bytes, handed out again once the device work queued after that call is done), checks each shard's identity, reads
the headers, refuses images over the pixel limit and checks the scans never checked
intact (:class:`~turbofeed.engine.chunk_reads.ChunkReader`); the windows come from the
transform's native program (:meth:`SampleWork.windows`). What the consumer needs of
the chunk is one :class:`Pack`: the byte tensors the decoder takes (views of the
buffer, made in one ``split``) and the rows' positions, windows, sizes and labels as
arrays.

The batch's work runs ahead of the consumer in two steps on two threads
(:mod:`turbofeed.engine.ahead`), so the decode of one batch overlaps the resize of the
batch before:

1. :meth:`ChunkedGpuDecode.decode_part`: one decoder call for every packed image
   (``decode_tensors`` where the decoder has it: the headers were read natively, so
   nothing is parsed again), the per-sample entries in another;
2. :meth:`ChunkedGpuDecode.resize_part`: one batched crop, resize, flip and normalise
   (:func:`~turbofeed.engine.gpu.resize_packed`: the decoded images joined in one
   device buffer, the cuts gathered in one index op), and the labels in one tensor.

Positions a chunk leaves (not a JPEG the native reader takes, damaged, known bad, not
a byte range of a local file) take the per-sample :meth:`GpuDecode.fill` and the
bad-sample policy, as do images the GPU decoder refuses (decoded on the CPU, counted
in ``stats.errors["gpu_fallback"]``): they join the batch in their positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..plan import EpochPlan
from ..transforms import Compose
from ..transforms.batched import to_device
from .chunk_reads import ChunkReader
from .decode_gpu import BatchDecoder, Encoded, GpuDecode
from .gpu import cpu_decode, fall_back, join_images, resize_joined, stream_mark
from .policy import PassPolicy
from .work import SampleWork

if TYPE_CHECKING:
    from .stream import Job


@dataclass(slots=True)
class Pack:
    """The rows of one chunk that the native reader took (row ``i`` for position
    ``js[i]`` of the batch): the bytes as 1-D uint8 CPU tensors (views of ``buffer``),
    ``table`` float64 (n, 7) (the window's box, output height and width, flip), the
    header's ``sizes`` int64 (n, 2) and the ``labels``."""

    js: np.ndarray
    encoded: list[torch.Tensor]
    table: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray
    buffer: np.ndarray
    starts: np.ndarray


@dataclass(slots=True)
class Entries:
    """A batch's buffer on the GPU path per chunk: the per-sample path's entries by
    position (None where none), and the chunks' packs in the order they finished."""

    slot: list[Encoded | None]
    packs: list[Pack] = field(default_factory=list)

    def __getitem__(self, j: int) -> Encoded | None:
        return self.slot[j]

    def __setitem__(self, j: int, entry: Encoded | None) -> None:
        self.slot[j] = entry

    def __len__(self) -> int:
        return len(self.slot)


@dataclass(slots=True)
class Rows:
    """A batch's decoded images by position, each with its window ``table`` row, its
    ``sizes`` row and label (as :class:`Pack`'s), ``js`` ascending; then ``flat``, the
    images joined in one tensor (``pixels`` emptied)."""

    js: np.ndarray
    pixels: list[torch.Tensor]
    table: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray
    #: the pixels joined (:func:`~turbofeed.engine.gpu.join_images`), once they are
    flat: torch.Tensor | None = None

    @staticmethod
    def of(js: list[int], entries: list[Any]) -> Rows:
        """The rows of entries decoded one by one (``pixels`` and ``window`` set)."""
        return Rows(np.asarray(js, np.int64), [e.pixels for e in entries],
                    np.array([(*e.window.box, e.window.height, e.window.width, e.window.flip) for e in entries],
                             np.float64).reshape(-1, 7),
                    np.array([e.pixels.shape[1:] for e in entries], np.int64).reshape(-1, 2),
                    np.array([e.label for e in entries], np.int64))

    def take(self, keep: np.ndarray) -> Rows:
        """The rows where ``keep`` (bool) holds."""
        return Rows(self.js[keep], [p for p, k in zip(self.pixels, keep.tolist()) if k], self.table[keep],
                    self.sizes[keep], self.labels[keep])

    def joined(self, other: Rows) -> Rows:
        """Both sets of rows, in position order."""
        js = np.concatenate([self.js, other.js])
        order = np.argsort(js, kind="stable")
        pixels = self.pixels + other.pixels
        return Rows(js[order], [pixels[k] for k in order.tolist()],
                    np.concatenate([self.table, other.table])[order], np.concatenate([self.sizes, other.sizes])[order],
                    np.concatenate([self.labels, other.labels])[order])


class ChunkedGpuDecode(GpuDecode):
    """decode.gpu whose feeding threads take a chunk of positions per task and whose
    batch is made per batch (the module docstring).

    Args:
        chunk: positions per chunk (:func:`turbofeed.engine.chunks.chunk_size`); the
            others as :class:`GpuDecode`.
    """

    def __init__(self, decoder: BatchDecoder, work: SampleWork, transform: Compose, plan: EpochPlan,
                 policy: PassPolicy, *, batch_size: int, chunk: int, channels_last: bool = False) -> None:
        super().__init__(decoder, work, transform, plan, policy, batch_size=batch_size, channels_last=channels_last)
        self.info = replace(self.info, per_task=chunk, chunked=True)
        self.reader = ChunkReader(work, plan, policy)
        self.decode_tensors = getattr(decoder, "decode_tensors", None)

    def acquire(self) -> Any:
        return Entries([None] * self.batch_size)

    # -- feeding threads -------------------------------------------------------------
    def fill_chunk(self, job: Job, start: int, stop: int) -> list[int]:
        """Pack positions ``start .. stop - 1`` of ``job`` (their bytes, windows, labels);
        returns the positions left for :meth:`GpuDecode.fill`.

        Raises:
            StorageError: a shard vanished, changed or failed to read.
        """
        chunk = self.reader.read(job, start, stop)
        ok = chunk.ok()
        encoded = list(torch.from_numpy(chunk.buffer).split(chunk.sizes.tolist()))  # one view per row
        if ok.all():  # the usual chunk: every row packed as it is
            left, js, gids, heights, widths, starts = chunk.left, chunk.js, chunk.gids, chunk.heights, \
                chunk.widths, chunk.starts
        else:
            left = sorted(chunk.left + chunk.js[~ok].tolist())
            rows = np.flatnonzero(ok)
            if not len(rows):
                self.reader.buffers.give([chunk.buffer])  # no byte of it is decoded
                return left
            js, gids, heights, widths, starts = chunk.js[rows], chunk.gids[rows], chunk.heights[rows], \
                chunk.widths[rows], chunk.starts[rows]
            encoded = [encoded[i] for i in rows.tolist()]
        windows = self.work.windows(gids, heights, widths)
        table = np.empty((len(js), 7), np.float64)
        table[:, :4] = windows.boxes
        table[:, 4], table[:, 5], table[:, 6] = windows.height, windows.width, windows.flips
        sizes = np.empty((len(js), 2), np.int64)  # not np.stack: a third of its cost here
        sizes[:, 0], sizes[:, 1] = heights, widths
        job.slot.packs.append(Pack(js, encoded, table, sizes, self.work.dataset.labels[gids], chunk.buffer, starts))
        job.ids[js] = gids
        return left

    # -- the batch's thread ------------------------------------------------------------
    def decode_part(self, job: Job, entries: Any, positions: range) -> Rows:
        """The batch (``positions`` is all of it) decoded: the packs in one decoder call, the
        per-sample path's entries in another, as rows in position order."""
        singles = [j for j in positions if entries.slot[j] is not None]
        held = self.decoded(job, entries.slot, singles) if singles else []  # the per-sample path's
        rows = self.decode_packs(job, entries, held)
        if held:  # entries by position (and refused images, decoded on the CPU) join the packed rows
            rows = rows.joined(Rows.of(held, [entries.slot[j] for j in held]))
        if rows.pixels:  # joined on the decode stream, the images let go (resize_joined reads the join)
            rows.flat, rows.sizes = join_images(rows.pixels, rows.sizes)
            rows.pixels = []
        return rows

    def device_tensors(self, decoded: Any) -> list[torch.Tensor]:
        rows: Rows = decoded
        return [] if rows.flat is None else [rows.flat]

    def resize_part(self, decoded: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows cropped, resized, flipped and normalised in one batched op
        (:func:`~turbofeed.engine.gpu.resize_packed`), and their labels, on the device."""
        transform = self.transform
        assert transform is not None and transform.size is not None  # stacked batches have one size
        rows: Rows = decoded
        if rows.flat is not None:
            out = resize_joined(rows.flat, rows.sizes, rows.table, transform.size, transform.output,
                                self.channels_last)
        else:  # every sample of the batch was skipped
            out = self.empty_batch()
        return out, to_device(torch.from_numpy(rows.labels), self.device)

    def decode_packs(self, job: Job, entries: Entries, held: list[int]) -> Rows:
        """The packs' rows decoded in one decoder call (``decode_tensors`` where the decoder
        has it, else ``decode`` with a byte view of each: a decoder of bytes only); the
        positions of images it refuses go through :meth:`refuse` and, where they then
        hold a sample, onto ``held``."""
        packs = sorted(entries.packs, key=lambda p: int(p.js[0]))
        if not packs:
            return Rows(np.empty(0, np.int64), [], np.empty((0, 7)), np.empty((0, 2), np.int64),
                        np.empty(0, np.int64))
        if self.decode_tensors is not None:
            decoded = list(self.decode_tensors([t for p in packs for t in p.encoded]))
        else:
            datas: list[Any] = [p.buffer[first:first + len(t)].data
                                for p in packs for first, t in zip(p.starts.tolist(), p.encoded)]
            decoded = list(self.decoder.decode(datas))
        rows = Rows(np.concatenate([p.js for p in packs]), decoded,
                    np.concatenate([p.table for p in packs]), np.concatenate([p.sizes for p in packs]),
                    np.concatenate([p.labels for p in packs]).astype(np.int64))
        # the decoder took the bytes: their buffers serve the next chunks once the device
        # work queued on this stream (the decoder's copies from them) is done
        self.reader.buffers.give([p.buffer for p in packs], stream_mark(self.device))
        entries.packs = []
        refused = [k for k, image in enumerate(decoded) if image is None]
        if not refused:
            return rows
        held += self.refuse(job, entries, rows.js[refused].tolist())
        keep = np.ones(len(decoded), bool)
        keep[refused] = False
        return rows.take(keep)

    def refuse(self, job: Job, entries: Entries, refused: list[int]) -> list[int]:
        """The positions whose images the GPU decoder refused, through the CPU fallback and
        the policy (:func:`~turbofeed.engine.gpu.fall_back`); returns those that hold a
        sample now (their entries CPU-decoded, ``pixels`` set)."""
        def refill(gid: int, i: int) -> None:
            data, window, image = cpu_decode(self.work, gid, self.transform, self.device)
            entries[i] = Encoded(gid, data, window, int(self.work.dataset.labels[gid]), image)

        return [j for j in refused if fall_back(job, j, self.plan, self.policy, refill)]

