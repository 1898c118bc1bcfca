"""The stage protocols, and the CPU choices of the decode stage.

A pass (:class:`turbofeed.engine.run.Engine`) is one list of named stages, each declaring
what :class:`~turbofeed.base.stageinfo.StageInfo` holds:

=============  ==========================  =================================  ==================
stage          where it runs               what it does                       what it counts
=============  ==========================  =================================  ==================
fetch.stream   per batch, own threads      streaming: shards (or pieces of    ``shards_downloaded``,
               (io/stores/stream.py)       them) downloaded ahead of their    ``pieces_downloaded``
                                           block, released after their last
                                           sample
fetch          per sample, worker threads  sample id -> bytes (or pixels)     ``seconds.fetch``, ``bytes_read``
decode.cpu     per sample, worker threads  crop-window decode + resize +      ``seconds.decode.cpu``,
               (fused: one native call)    flip + normalise into the slot     ``seconds.augment``, ``collate``
decode.gpu     per sample: bytes, window;  one batched nvJPEG call, batched   ``seconds.decode.gpu``,
               per batch: on the device    crop/resize/normalise              ``errors.gpu_fallback``
decode.hybrid  both of the above           a batch split by measured speed    as both
collate        per batch, caller thread    the slot's arrays as the batch     ``samples``, ``batches``
deliver        per batch, caller thread    tensors, async copy to the GPU     ``seconds.wait``
=============  ==========================  =================================  ==================

The decode stage is chosen once per pass (:func:`turbofeed.engine.choose.decode_stage`);
every choice has the same two halves: ``acquire``/``fill`` (per sample, worker threads,
after the fetch it performs through :class:`~turbofeed.engine.work.SampleWork`) and
``finish`` (per batch, the consumer's thread). A new decode backend is one new class
with these three methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..base.stageinfo import StageInfo
from .bucket_slots import BucketPool, PendingSlot
from .slots import Slot, SlotPool
from .work import Decoded, SampleWork

if TYPE_CHECKING:
    from .stream import Job


class SampleStage(Protocol):
    """The per-sample half of a pass, run by the worker threads."""

    info: StageInfo

    def acquire(self) -> Any:
        """An empty buffer for a new batch (the consumer's thread)."""
        ...

    def fill(self, gid: int, buffer: Any, j: int) -> None:
        """Load sample ``gid`` into position ``j`` of ``buffer``; raise SampleError if bad."""
        ...


class ChunkStage(SampleStage, Protocol):
    """A per-sample half that also fills whole chunks (``info.chunked``)."""

    def fill_chunk(self, job: Job, start: int, stop: int) -> list[int]:
        """Fill positions ``start .. stop - 1`` of ``job``; the positions left for :meth:`fill`."""
        ...


class AheadStage(Protocol):
    """A decode stage whose per-batch half runs ahead of the consumer (``info.ahead``):
    ``resize_ahead(job, decode_ahead(job))`` is :meth:`prepare`, in two steps."""

    def decode_ahead(self, job: Job) -> Any:
        """The batch's first step off the consumer's thread: the decoder call."""
        ...

    def resize_ahead(self, job: Job, decoded: Any) -> Any:
        """Its second step, on another thread: the batched ops (device work queued)."""
        ...

    def prepare(self, job: Job) -> Any:
        """Both steps in the calling thread."""
        ...

    def complete(self, job: Job, prepared: Any) -> Any:
        """In the consumer's thread: the batch out of what :meth:`prepare` made."""
        ...


class DecodeStage(SampleStage, Protocol):
    """A choice of the decode stage: the per-sample half and the per-batch half."""

    def finish(self, job: Job) -> Any:
        """The batch out of a finished job (the consumer's thread; may run device work)."""
        ...

    def close(self) -> None:
        """Give back what the stage holds (slots waiting for a copy); idempotent."""
        ...


@dataclass
class HostBatch:
    """A batch on the host, as the CPU decode stages leave it.

    ``images``: the first N rows of ``slot``, or a list of per-sample arrays (no slot).
    The deliver stage hands them out through :meth:`Slot.lend` (the slot is free again
    when every tensor made from them is gone) or releases the slot itself once its copy
    to the GPU finished.
    """

    images: np.ndarray | list[Any]
    labels: np.ndarray
    slot: Slot | None = None


class FusedCpuDecode:
    """decode.cpu for a transform of one output size: each worker decodes only the crop
    window, resizes, flips and normalises it in one native call straight into its row
    of a pooled batch slot. With aspect-ratio buckets (``pool`` a
    :class:`~turbofeed.engine.bucket_slots.BucketPool`), the slot of the batch's bucket."""

    info = StageInfo("decode.cpu", "sample", ("fetch", "decode.cpu", "augment", "collate"))

    def __init__(self, work: SampleWork, pool: SlotPool | BucketPool, *, channels_first: bool) -> None:
        self.work = work
        self.pool = pool
        self.channels_first = channels_first

    def acquire(self) -> Slot | PendingSlot:
        return self.pool.acquire()

    def fill(self, gid: int, buffer: Slot | PendingSlot, j: int) -> None:
        slot = buffer.for_sample(gid) if isinstance(buffer, PendingSlot) else buffer
        self.work.into_slot(gid, slot, j, channels_first=self.channels_first)

    def finish(self, job: Job) -> HostBatch:
        slot: Slot = job.slot.taken() if isinstance(job.slot, PendingSlot) else job.slot
        keep = np.flatnonzero(job.ok)  # fewer only under on_error="skip"
        n = len(job)
        if len(keep) < n:
            slot.images[:len(keep)] = slot.images[keep]
            slot.labels[:len(keep)] = slot.labels[keep]
            n = len(keep)
        return HostBatch(slot.images[:n], slot.labels[:n].copy(), slot)

    def close(self) -> None:
        pass


class PerSample:
    """A decode stage whose result is one object per sample, made by ``make(id)`` on the
    worker threads (outputs of varying size, Pipeline samples, undecoded bytes)."""

    def __init__(self, info: StageInfo, batch_size: int, make: Callable[[int], Any]) -> None:
        self.info = info
        self.batch_size = batch_size
        self.make = make

    def acquire(self) -> list[Any]:
        return [None] * self.batch_size

    def fill(self, gid: int, buffer: list[Any], j: int) -> None:
        buffer[j] = self.make(gid)

    def finish(self, job: Job) -> list[Any]:
        """The results of the positions that hold a sample, in order."""
        return [job.slot[i] for i in np.flatnonzero(job.ok)]

    def close(self) -> None:
        pass


def per_sample_cpu(work: SampleWork, batch_size: int, shape: Callable[[int, Decoded], Any]) -> PerSample:
    """decode.cpu for outputs of varying size (or none): ``shape(id, decoded)`` per sample."""
    return PerSample(StageInfo("decode.cpu", "sample", ("fetch", "decode.cpu", "augment")), batch_size,
                     lambda gid: shape(gid, work.load(gid)))


def fetch_only(work: SampleWork, batch_size: int, shape: Callable[[int, Any], Any]) -> PerSample:
    """The fetch stage alone (no decode): ``shape(id, data)`` per sample."""
    return PerSample(StageInfo("fetch", "sample", ("fetch",)), batch_size, lambda gid: shape(gid, work.fetch(gid)))


def read_only(batch_size: int, read: Callable[[int], Any]) -> PerSample:
    """The front-end's own reads (no fetch of the image, no decode): ``read(id)`` per sample."""
    return PerSample(StageInfo("fetch", "sample", ("fetch",)), batch_size, read)


def chw_with_label(gid: int, sample: Decoded) -> tuple[np.ndarray, int]:
    """The DataLoader's per-sample shape: a (3, H, W) uint8 array (flip applied) and its label."""
    pixels = sample.pixels[:, ::-1] if sample.flip else sample.pixels
    return np.ascontiguousarray(pixels.transpose(2, 0, 1)), sample.label
