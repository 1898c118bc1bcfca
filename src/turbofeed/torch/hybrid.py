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
from dataclasses import dataclass
from typing import Any

from ..pipeline.buffers import Slot

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
