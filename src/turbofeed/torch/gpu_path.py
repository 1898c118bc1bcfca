"""The GPU decode path: CPU threads only read bytes and choose crop windows; each batch
is decoded in one nvJPEG call and cropped, resized, flipped and normalised in one
batched op on the device.

Images the GPU decoder rejects (CMYK, unusual sampling) are decoded on the CPU and
counted in ``stats.errors["gpu_fallback"]``; images nobody can decode go through the
usual bad-sample policy, so batch shapes and step counts stay as on the CPU path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from ..pipeline.buffers import Slot, SlotPool
from ..pipeline.policy import PassPolicy
from ..pipeline.stream import Job
from ..pipeline.work import SampleWork
from ..plan import EpochPlan
from ..transforms import Compose, Window
from ._gpu_batch import cpu_decode, decode_job, header_window, resize_batch
from .device import apply_output
from .hybrid import HybridSlot, HybridSplit


class BatchDecoder(Protocol):
    """What the GPU path needs from a decoder (``turbofeed.decode.gpu.GpuDecoder`` or your own)."""

    device: torch.device

    def decode(self, datas: list[bytes]) -> list[torch.Tensor | None]: ...


@dataclass
class Encoded:
    """One sample as the worker threads leave it: bytes, window, label; pixels once decoded."""

    data: bytes | np.ndarray
    window: Window
    label: int
    pixels: torch.Tensor | None = None


class GpuPath:
    """Per-epoch helper of the loader iterator for ``gpu_decode``.

    With ``hybrid`` (a :class:`HybridSplit`) and ``host_slots`` (a pool of NCHW uint8
    host slots), each batch is split: the first positions are decoded on the GPU, the
    rest by the CPU threads (``work`` must then produce uint8: no output op).
    ``policy`` is the pass's, shared with the worker threads of its BatchStream.
    """

    def __init__(self, decoder: BatchDecoder, work: SampleWork, transform: Compose, plan: EpochPlan,
                 policy: PassPolicy, channels_last: bool, hybrid: HybridSplit | None = None,
                 host_slots: SlotPool | None = None) -> None:
        self.decoder = decoder
        self.work = work
        if transform.size is None:
            raise ValueError(f"the GPU path needs a transform with a fixed output size, got {transform!r}")
        self.transform = transform
        self.size: tuple[int, int] = transform.size
        self.plan = plan
        self.policy = policy
        self.channels_last = channels_last
        self.hybrid = hybrid
        self.host_slots = host_slots
        self.device = torch.device(decoder.device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._held: list[tuple[Slot, Any]] = []  # host slots whose copy to the GPU may still run
        self._timing: tuple[Any, Any, float, int] | None = None  # CUDA events of the last GPU part

    def acquire(self, batch_size: int) -> list | HybridSlot:
        """An empty slot for a new batch; in hybrid mode it also fixes the batch's split."""
        if self.hybrid is None:
            return [None] * batch_size
        self.release_held(keep=2)  # copies of the last two batches may still run
        return HybridSlot([None] * batch_size, self._host_pool.acquire(), self.hybrid.gpu_count(batch_size))

    def fill(self, gid: int, slot: list | HybridSlot, j: int) -> None:
        """Worker side: fetch the bytes and choose the window from the header (a GPU
        position), or decode the sample into the host slot (a CPU position of a hybrid batch)."""
        if isinstance(slot, HybridSlot):
            if j >= slot.gpu_count:
                started = time.perf_counter()
                self.work.into_slot(gid, slot.host, j, channels_first=True)
                self._split.add_cpu(time.perf_counter() - started)
                return
            slot = slot.entries
        data = self.work.fetch(gid)
        window = header_window(self.work, gid, data, self.transform)
        slot[j] = Encoded(data, window, int(self.work.dataset.labels[gid]))

    def to_tensors(self, job: Job) -> tuple[torch.Tensor, torch.Tensor]:
        started = time.perf_counter()
        if self.stream is None:
            return self._assemble(job, started)
        with torch.cuda.stream(self.stream):
            images, labels = self._assemble(job, started)
            done = torch.cuda.Event()
            done.record(self.stream)
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(done)
        images.record_stream(consumer)
        labels.record_stream(consumer)
        if isinstance(job.slot, HybridSlot):
            self._held.append((job.slot.host, done))
        return images, labels

    def _assemble(self, job: Job, started: float) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(job.slot, HybridSlot):
            return self._batch(job, job.slot, range(len(job)), started)
        slot = job.slot
        k = min(slot.gpu_count, len(job))
        self._read_timing()
        parts = []
        if k:
            timing = self._start_timing()
            parts.append(self._batch(job, slot.entries, range(k), started))
            self._finish_timing(timing, time.perf_counter() - started, int(job.ok[:k].sum()))
        if k < len(job):
            parts.append(self._host_part(job, slot, k))
        if len(parts) == 1:
            images, labels = parts[0]
        else:
            images, labels = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            if self.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
        if self.stream is None:  # the CPU part was copied out of the host slot already
            self._host_pool.release(slot.host)
        return images, labels

    def _host_part(self, job: Job, slot: HybridSlot, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions ``k..`` that the CPU threads decoded: uint8 NCHW rows of the host slot,
        copied to the device as one block, then normalised there like the GPU part."""
        n = len(job)
        rows = torch.from_numpy(slot.host.images[k:n])
        images = rows.to(self.device, non_blocking=True) if self.stream is not None else rows.clone()
        kept = np.flatnonzero(job.ok[k:n])
        if len(kept) < n - k:  # skipped samples; an index of known length needs no device sync
            images = images.index_select(0, torch.from_numpy(kept).to(images.device))
        images = apply_output(images, self.transform.output)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = torch.from_numpy(slot.host.labels[k:n][job.ok[k:n]].copy()).to(self.device)
        return images, labels

    def _batch(self, job: Job, entries: list, positions: range, started: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode and augment the GPU positions of a batch in one call each."""
        def refill(gid: int, i: int) -> None:  # an image the GPU refused, decoded on the CPU
            data, window, pixels = cpu_decode(self.work, gid, self.transform, self.device)
            entries[i] = Encoded(data, window, int(self.work.dataset.labels[gid]), pixels)

        kept = [entries[i] for i in decode_job(self.decoder, job, self.plan, self.policy, refill, entries, positions)]
        if kept:
            out = resize_batch([e.pixels for e in kept], [e.window for e in kept], self.size,
                               self.transform.output, self.channels_last)
        else:  # every sample of this part was skipped
            dtype = torch.uint8 if self.transform.output is None else getattr(torch, self.transform.output.torch_dtype)
            out = torch.empty((0, 3, *self.size), dtype=dtype, device=self.device)
        labels = torch.tensor([e.label for e in kept], dtype=torch.int64).to(self.device)
        self.policy.stats.add_times(decode_gpu=time.perf_counter() - started)
        return out, labels

    # -- hybrid bookkeeping --------------------------------------------------------------
    @property
    def _split(self) -> HybridSplit:
        assert self.hybrid is not None  # only hybrid batches (HybridSlot) come here
        return self.hybrid

    @property
    def _host_pool(self) -> SlotPool:
        assert self.host_slots is not None  # hybrid mode comes with host slots
        return self.host_slots

    def _start_timing(self) -> Any:
        if self.stream is None:
            return None
        start = torch.cuda.Event(enable_timing=True)
        start.record(self.stream)
        return start

    def _finish_timing(self, start: Any, host_seconds: float, samples: int) -> None:
        """Time the GPU part: host seconds now; on CUDA also the device time, read at the
        next batch (never waited for), since the decode may run on after the call returns."""
        if start is None:
            self._split.add_gpu(host_seconds, samples)
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record(self.stream)
        self._timing = (start, end, host_seconds, samples)

    def _read_timing(self) -> None:
        if self._timing is None:
            return
        start, end, host_seconds, samples = self._timing
        if end.query():
            self._split.add_gpu(max(host_seconds, start.elapsed_time(end) / 1000.0), samples)
            self._timing = None

    def release_held(self, keep: int = 0) -> None:
        """Give host slots back once their copies to the GPU are done, waiting for the
        oldest ones so that at most ``keep`` stay held (0: wait for all)."""
        still = []
        for index, (host, done) in enumerate(self._held):
            if index < len(self._held) - keep:
                done.synchronize()
            if done.query():
                self._host_pool.release(host)
            else:
                still.append((host, done))
        self._held = still
