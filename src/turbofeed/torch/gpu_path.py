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
from ..pipeline.policy import ErrorPolicy
from ..pipeline.stream import Job, fill_position
from ..pipeline.work import SampleWork
from ..plan import EpochPlan
from ..transforms import Compose, Window
from ..transforms.batched import pad_batch, resized_crop, window_tensors


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
    """Per-epoch helper of the loader iterator for ``gpu_decode``."""

    def __init__(self, decoder: BatchDecoder, work: SampleWork, transform: Compose, plan: EpochPlan,
                 policy: ErrorPolicy, channels_last: bool) -> None:
        self.decoder = decoder
        self.work = work
        self.transform = transform
        self.plan = plan
        self.policy = policy
        self.channels_last = channels_last
        self.device = torch.device(decoder.device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def fill(self, gid: int, slot: list, j: int) -> None:
        """Worker side: fetch the bytes and choose the window from the header."""
        data = self.work.fetch(gid)
        try:
            info = probe(data)
            window = self.transform.window(info.height, info.width, self.work._rng(gid))
        except Exception as exc:
            raise self.work._error(gid, "decode.gpu", exc) from exc
        slot[j] = Encoded(data, window, int(self.work.dataset.labels[gid]))

    def _cpu_fill(self, slot: list, j: int):
        def fill(gid: int) -> None:
            data = self.work.fetch(gid)
            try:
                pixels = decode(data)
                window = self.transform.window(pixels.shape[0], pixels.shape[1], self.work._rng(gid))
            except Exception as exc:
                raise self.work._error(gid, "decode.cpu", exc) from exc
            tensor = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))).to(self.device)
            slot[j] = Encoded(data, window, int(self.work.dataset.labels[gid]), tensor)
        return fill

    def to_tensors(self, job: Job) -> tuple[torch.Tensor, torch.Tensor]:
        started = time.perf_counter()
        keep = [i for i in range(len(job)) if job.ok[i]]
        if self.stream is None:
            return self._batch(job, keep, started)
        with torch.cuda.stream(self.stream):
            images, labels = self._batch(job, keep, started)
            done = torch.cuda.Event()
            done.record(self.stream)
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(done)
        images.record_stream(consumer)
        labels.record_stream(consumer)
        return images, labels

    def _batch(self, job: Job, keep: list[int], started: float) -> tuple[torch.Tensor, torch.Tensor]:
        entries: list[Encoded] = [job.slot[i] for i in keep]
        # pre-decoded pixels (HDF5, Zarr, .npy sources) skip the decoder
        encoded = iter(self.decoder.decode([e.data for e in entries if not isinstance(e.data, np.ndarray)]))
        decoded = [_pixels_tensor(e.data, self.device) if isinstance(e.data, np.ndarray) else next(encoded)
                   for e in entries]
        for k, (i, pixels) in enumerate(zip(keep, decoded)):
            entries[k].pixels = pixels
            if pixels is None:  # the GPU refused it: the CPU decodes it, or the policy replaces it
                self.policy.stats.count_error("gpu_fallback")
                gid = fill_position(self.plan, job.positions[i], self._cpu_fill(job.slot, i), self.policy)
                if gid is None:
                    job.ok[i] = False
                else:
                    job.ids[i] = gid
                    entries[k] = job.slot[i]
        entries = [e for i, e in zip(keep, entries) if job.ok[i]]
        images, sizes = pad_batch([e.pixels for e in entries])
        boxes, flips = window_tensors([e.window for e in entries])
        out = resized_crop(images, sizes, boxes, self.transform.size, flips, self.transform.output,
                           self.channels_last)
        labels = torch.tensor([e.label for e in entries], dtype=torch.int64).to(self.device)
        self.policy.stats.add_times(decode_gpu=time.perf_counter() - started)
        return out, labels
