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

from ..decode import decode, probe
from ..decode.cpu import as_rgb
from ..pipeline.buffers import Slot, SlotPool
from ..pipeline.policy import ErrorPolicy
from ..pipeline.stream import Job, fill_position
from ..pipeline.work import SampleWork
from ..plan import EpochPlan
from ..transforms import Compose, Window
from ..transforms.batched import pad_batch, resized_crop, window_tensors
from .device import apply_output
from .hybrid import HybridSlot, HybridSplit


class BatchDecoder(Protocol):
    """What the GPU path needs from a decoder (``turbofeed.decode.gpu.GpuDecoder`` or your own)."""

    device: torch.device

    def decode(self, datas: list[bytes]) -> list[torch.Tensor | None]: ...


@dataclass
class Encoded:
    """One sample as the worker threads leave it: bytes, window, label; pixels once decoded."""

    data: bytes
    window: Window
    label: int
    pixels: torch.Tensor | None = None


def _pixels_tensor(pixels: np.ndarray, device: torch.device) -> torch.Tensor:
    """A pre-decoded HWC uint8 image as the (3, H, W) tensor a decoder would return."""
    return torch.from_numpy(np.ascontiguousarray(as_rgb(pixels).transpose(2, 0, 1))).to(device)


class GpuPath:
    """Per-epoch helper of the loader iterator for ``gpu_decode``.

    With ``hybrid`` (a :class:`HybridSplit`) and ``host_slots`` (a pool of NCHW uint8
    host slots), each batch is split: the first positions are decoded on the GPU, the
    rest by the CPU threads (``work`` must then produce uint8: no output op).
    """

    def __init__(self, decoder: BatchDecoder, work: SampleWork, transform: Compose, plan: EpochPlan,
                 policy: ErrorPolicy, channels_last: bool, hybrid: HybridSplit | None = None,
                 host_slots: SlotPool | None = None) -> None:
        self.decoder = decoder
        self.work = work
        self.transform = transform
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
        return HybridSlot([None] * batch_size, self.host_slots.acquire(), self.hybrid.gpu_count(batch_size))

    def fill(self, gid: int, slot: list | HybridSlot, j: int) -> None:
        """Worker side: fetch the bytes and choose the window from the header (a GPU
        position), or decode the sample into the host slot (a CPU position of a hybrid batch)."""
        if isinstance(slot, HybridSlot):
            if j >= slot.gpu_count:
                started = time.perf_counter()
                self.work.into_slot(gid, slot.host, j, channels_first=True)
                self.hybrid.add_cpu(time.perf_counter() - started)
                return
            slot = slot.entries
        data = self.work.fetch(gid)
        try:
            info = probe(data)
            window = self.transform.window(info.height, info.width, self.work._rng(gid))
        except Exception as exc:
            raise self.work._error(gid, "decode.gpu", exc) from exc
        slot[j] = Encoded(data, window, int(self.work.dataset.labels[gid]))

    def _cpu_fill(self, entries: list, j: int):
        def fill(gid: int) -> None:
            data = self.work.fetch(gid)
            try:
                pixels = decode(data)
                window = self.transform.window(pixels.shape[0], pixels.shape[1], self.work._rng(gid))
            except Exception as exc:
                raise self.work._error(gid, "decode.cpu", exc) from exc
            tensor = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))).to(self.device)
            entries[j] = Encoded(data, window, int(self.work.dataset.labels[gid]), tensor)
        return fill

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
        images = torch.cat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        labels = torch.cat([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
        if self.stream is None:  # the CPU part was copied out of the host slot already
            self.host_slots.release(slot.host)
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

    def _batch(self, job: Job, slots: list, positions: range, started: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode and augment the GPU positions of a batch in one call each."""
        keep = [i for i in positions if job.ok[i]]
        entries: list[Encoded] = [slots[i] for i in keep]
        # pre-decoded pixels (HDF5, Zarr, .npy sources) skip the decoder
        encoded = iter(self.decoder.decode([e.data for e in entries if not isinstance(e.data, np.ndarray)]))
        decoded = [_pixels_tensor(e.data, self.device) if isinstance(e.data, np.ndarray) else next(encoded)
                   for e in entries]
        for k, (i, pixels) in enumerate(zip(keep, decoded)):
            entries[k].pixels = pixels
            if pixels is None:  # the GPU refused it: the CPU decodes it, or the policy replaces it
                self.policy.stats.count_error("gpu_fallback")
                gid = fill_position(self.plan, job.positions[i], self._cpu_fill(slots, i), self.policy)
                if gid is None:
                    job.ok[i] = False
                else:
                    job.ids[i] = gid
                    entries[k] = slots[i]
        entries = [e for i, e in zip(keep, entries) if job.ok[i]]
        if not entries:
            h, w = self.transform.size
            dtype = torch.uint8 if self.transform.output is None else getattr(torch, self.transform.output.dtype.name)
            return (torch.empty((0, 3, h, w), dtype=dtype, device=self.device),
                    torch.empty(0, dtype=torch.int64, device=self.device))
        images, sizes = pad_batch([e.pixels for e in entries])
        boxes, flips = window_tensors([e.window for e in entries])
        out = resized_crop(images, sizes, boxes, self.transform.size, flips, self.transform.output,
                           self.channels_last)
        labels = torch.tensor([e.label for e in entries], dtype=torch.int64).to(self.device)
        self.policy.stats.add_times(decode_gpu=time.perf_counter() - started)
        return out, labels

    # -- hybrid bookkeeping --------------------------------------------------------------
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
            self.hybrid.add_gpu(host_seconds, samples)
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record(self.stream)
        self._timing = (start, end, host_seconds, samples)

    def _read_timing(self) -> None:
        if self._timing is None:
            return
        start, end, host_seconds, samples = self._timing
        if end.query():
            self.hybrid.add_gpu(max(host_seconds, start.elapsed_time(end) / 1000.0), samples)
            self._timing = None

    def release_held(self, keep: int = 0) -> None:
        """Give host slots back once their copies to the GPU are done, waiting for the
        oldest ones so that at most ``keep`` stay held (0: wait for all)."""
        still = []
        for index, (host, done) in enumerate(self._held):
            if index < len(self._held) - keep:
                done.synchronize()
            if done.query():
                self.host_slots.release(host)
            else:
                still.append((host, done))
        self._held = still
