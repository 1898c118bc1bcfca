"""Hybrid decode: each batch split between the CPU decoder threads and the GPU decoder,
in proportion to the speed each side has shown so far.

The first ``gpu_count`` positions of a batch go to the GPU (threads read bytes and pick
windows; one batched decode), the rest to the CPU threads (native crop-window decode
into a pinned uint8 slot, copied over and normalised on the device). Both sides then
finish a batch at about the same time. Which samples a batch holds and their order do
not depend on the split; only the resampler that produced each sample's pixels does
(the two agree within one level, see :mod:`turbofeed.transforms.batched`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..base.stageinfo import StageInfo
from ..transforms.batched import normalize, to_device
from .decode_gpu import GpuDecode
from .slots import Slot, SlotPool
from .stages import FusedCpuDecode

if TYPE_CHECKING:
    from .stream import Job

# Weight of the newest batch in the running speed estimates: reacts within a few
# batches to a change (another job on the GPU), yet one slow batch does not swing it.
SMOOTHING = 0.3


class HybridSplit:
    """Running estimates of seconds per sample on each side, and the split they imply.

    Args:
        cpu_threads: worker threads decoding CPU samples in parallel.
        initial_share: fraction of a batch sent to the GPU before both sides were timed.
    """

    def __init__(self, cpu_threads: int, initial_share: float = 0.5) -> None:
        self.cpu_threads = max(1, cpu_threads)
        self.initial_share = initial_share
        self.cpu_seconds: float | None = None  # per sample, on one thread
        self.gpu_seconds: float | None = None  # per sample, a whole batched call / its size
        self._lock = threading.Lock()
        self._cpu_sum = 0.0
        self._cpu_n = 0

    def add_cpu(self, seconds: float) -> None:
        """One CPU sample took ``seconds`` of its thread (called from worker threads)."""
        with self._lock:
            self._cpu_sum += seconds
            self._cpu_n += 1

    def add_gpu(self, seconds: float, samples: int) -> None:
        """One batched GPU call of ``samples`` images took ``seconds``."""
        if samples > 0:
            self.gpu_seconds = _blend(self.gpu_seconds, seconds / samples)

    def gpu_share(self) -> float:
        """Fraction of a batch for the GPU: its rate over the sum of both rates."""
        with self._lock:
            if self._cpu_n:
                self.cpu_seconds = _blend(self.cpu_seconds, self._cpu_sum / self._cpu_n)
                self._cpu_sum, self._cpu_n = 0.0, 0
        if not self.cpu_seconds or not self.gpu_seconds:
            return self.initial_share
        cpu_rate = self.cpu_threads / self.cpu_seconds
        gpu_rate = 1.0 / self.gpu_seconds
        return gpu_rate / (gpu_rate + cpu_rate)

    def gpu_count(self, batch_size: int) -> int:
        """Samples of a batch of ``batch_size`` for the GPU. At least one on each side
        (batches of 2 or more), so both speeds stay measured as they change."""
        count = round(self.gpu_share() * batch_size)
        if batch_size < 2:
            return count
        return min(batch_size - 1, max(1, count))

    def __repr__(self) -> str:
        # not gpu_share(): it folds pending CPU timings into the average, a repr must not
        return (f"HybridSplit(cpu_seconds={self.cpu_seconds}, gpu_seconds={self.gpu_seconds}, "
                f"cpu_threads={self.cpu_threads})")


def _blend(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new


@dataclass
class HybridSlot:
    """One batch in flight: GPU-bound entries (positions ``< gpu_count``) and the host
    slot the CPU threads write the others into (NCHW uint8, pinned on CUDA machines)."""

    entries: list[Any]
    host: Slot
    gpu_count: int


class HybridDecode:
    """The hybrid choice of the decode stage: positions ``< gpu_count`` of each batch go
    to ``gpu`` (threads read bytes and pick windows; one batched decode), the rest to
    ``cpu`` (uint8 NCHW rows of a host slot, pinned on CUDA machines, copied over and
    normalised on the device like the GPU part)."""

    info = StageInfo("decode.hybrid", "sample+batch", ("fetch", "decode.cpu", "decode.gpu", "errors.gpu_fallback"))

    def __init__(self, gpu: GpuDecode, cpu: FusedCpuDecode, split: HybridSplit) -> None:
        self.gpu = gpu
        self.cpu = cpu
        self.split = split
        self.device = gpu.device
        self._held: list[tuple[Slot, Any]] = []  # host slots whose copy to the GPU may still run
        self._timing: tuple[Any, Any, float, int] | None = None  # CUDA events of the last GPU part

    @property
    def host_pool(self) -> SlotPool:
        pool = self.cpu.pool
        assert isinstance(pool, SlotPool)  # hybrid needs one output size: never a bucketed pool
        return pool

    def acquire(self) -> HybridSlot:
        """An empty batch whose split is fixed now, from the speeds measured so far."""
        self.release_held(keep=2)  # copies of the last two batches may still run
        batch_size = self.gpu.batch_size
        return HybridSlot([None] * batch_size, self.host_pool.acquire(), self.split.gpu_count(batch_size))

    def fill(self, gid: int, buffer: HybridSlot, j: int) -> None:
        if j >= buffer.gpu_count:
            started = time.perf_counter()
            self.cpu.fill(gid, buffer.host, j)
            self.split.add_cpu(time.perf_counter() - started)
        else:
            self.gpu.fill(gid, buffer.entries, j)

    def finish(self, job: Job) -> tuple[torch.Tensor, torch.Tensor]:
        started = time.perf_counter()
        slot: HybridSlot = job.slot
        with self.gpu.on_side_stream() as done:
            images, labels = self._assemble(job, slot, started)
        self.gpu.hand_over(done, images, labels)
        if done is None:  # the CPU part was copied out of the host slot already
            self.host_pool.release(slot.host)
        else:
            self._held.append((slot.host, done))
        return images, labels

    def _assemble(self, job: Job, slot: HybridSlot, started: float) -> tuple[torch.Tensor, torch.Tensor]:
        k = min(slot.gpu_count, len(job))
        self._read_timing()
        parts = []
        if k:
            timing = self._start_timing()
            parts.append(self.gpu.batch(job, slot.entries, range(k), started))
            self._finish_timing(timing, time.perf_counter() - started, int(job.ok[:k].sum()))
        if k < len(job):
            parts.append(self._host_part(job, slot, k))
        if len(parts) == 1:
            return parts[0]
        images, labels = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        if self.gpu.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, labels

    def _host_part(self, job: Job, slot: HybridSlot, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions ``k..`` that the CPU threads decoded: uint8 NCHW rows of the host slot,
        copied to the device as one block, then normalised there like the GPU part."""
        n = len(job)
        rows = torch.from_numpy(slot.host.images[k:n])
        images = rows.to(self.device, non_blocking=True) if self.gpu.stream is not None else rows.clone()
        kept = np.flatnonzero(job.ok[k:n])
        if len(kept) < n - k:  # skipped samples; an index of known length needs no device sync
            images = images.index_select(0, to_device(torch.from_numpy(kept), images.device))
        transform = self.gpu.transform
        if transform is not None and transform.output is not None:
            images = normalize(images, transform.output)
        if self.gpu.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = to_device(torch.from_numpy(slot.host.labels[k:n][job.ok[k:n]].copy()), self.device)
        return images, labels

    # -- timing --------------------------------------------------------------------------
    def _start_timing(self) -> Any:
        if self.gpu.stream is None:
            return None
        start = torch.cuda.Event(enable_timing=True)
        start.record(self.gpu.stream)
        return start

    def _finish_timing(self, start: Any, host_seconds: float, samples: int) -> None:
        """Time the GPU part: host seconds now; on CUDA also the device time, read at the
        next batch (never waited for), since the decode may run on after the call returns."""
        if start is None:
            self.split.add_gpu(host_seconds, samples)
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record(self.gpu.stream)
        self._timing = (start, end, host_seconds, samples)

    def _read_timing(self) -> None:
        if self._timing is None:
            return
        start, end, host_seconds, samples = self._timing
        if end.query():
            self.split.add_gpu(max(host_seconds, start.elapsed_time(end) / 1000.0), samples)
            self._timing = None

    def release_held(self, keep: int = 0) -> None:
        """Give host slots back once their copies to the GPU are done, waiting for the
        oldest ones so that at most ``keep`` stay held (0: wait for all)."""
        still = []
        for index, (host, done) in enumerate(self._held):
            if index < len(self._held) - keep:
                done.synchronize()
            if done.query():
                self.host_pool.release(host)
            else:
                still.append((host, done))
        self._held = still

    def close(self) -> None:
        self.release_held()
