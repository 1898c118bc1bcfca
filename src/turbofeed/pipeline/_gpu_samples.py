"""``gpu_decode`` for :class:`turbofeed.Pipeline`: CPU threads only read bytes and choose
crop windows; each chunk of samples is decoded in one decoder call (nvJPEG) and, with a
transform, cropped, resized, flipped and normalised in one batched op on the device.

Images the decoder refuses are decoded on the CPU and counted in
``stats.errors["gpu_fallback"]``; images nobody can decode go through the bad-sample
policy, as on the CPU path. Imported only when a Pipeline has a decoder (needs torch).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..plan import EpochPlan
from ..torch._gpu_batch import cpu_decode, decode_job, header_window, resize_batch
from ..transforms import Compose, Window
from .policy import PassPolicy
from .samples import Sample
from .stream import Job
from .work import SampleWork


@dataclass
class Pending:
    """One sample as the worker threads leave it: encoded bytes and window; pixels once decoded."""

    sample: Sample
    data: bytes | np.ndarray
    window: Window | None
    pixels: torch.Tensor | None = None


class GpuChunks:
    """One epoch of a Pipeline's GPU decoding: :meth:`fill` runs on the worker threads,
    :meth:`samples` on the caller's thread once a chunk's bytes are all in.

    Args:
        decoder: ``device`` and ``decode(list of bytes) -> list of (3, H, W) uint8
            tensors or None`` (:class:`turbofeed.decode.gpu.GpuDecoder` or your own).
        work, transform, plan, policy: the epoch's sample loader, transform (or None),
            plan and bad-sample policy (the pass's, shared with its BatchStream).
        make_sample: a new :class:`Sample` (key, label, shard) for a sample id.
    """

    def __init__(self, decoder: Any, work: SampleWork, transform: Compose | None, plan: EpochPlan,
                 policy: PassPolicy, make_sample: Callable[[int], Sample]) -> None:
        self.decoder = decoder
        self.device = torch.device(decoder.device)
        self.work = work
        self.transform = transform
        self.plan = plan
        self.policy = policy
        self.make_sample = make_sample

    def fill(self, gid: int, slot: list, j: int) -> None:
        """Worker side: fetch the bytes and, with a transform, choose the window from the header."""
        data = self.work.fetch(gid)
        window = None if self.transform is None else header_window(self.work, gid, data, self.transform)
        slot[j] = Pending(self.make_sample(gid), data, window)

    def samples(self, job: Job) -> list[Sample]:
        """The chunk's samples in order, each with ``tensor`` (H, W, 3) on the decoder's device.

        Raises:
            SampleError: a bad sample under ``on_error="raise"``.
        """
        started = time.perf_counter()

        def refill(gid: int, i: int) -> None:  # the CPU decodes what the GPU refused
            data, window, pixels = cpu_decode(self.work, gid, self.transform, self.device)
            job.slot[i] = Pending(self.make_sample(gid), data, window, pixels)

        entries: list[Pending] = [job.slot[i] for i in decode_job(self.decoder, job, self.plan, self.policy,
                                                                   refill)]
        if self.transform is None:
            for e in entries:  # a view of the decoder's own tensor
                assert e.pixels is not None  # decode_job returns the decoded entries only
                e.sample.tensor = e.pixels.permute(1, 2, 0)
        else:
            # (entry, pixels, window), by output size: one group unless the size varies
            by_size: dict[tuple[int, int], list[tuple[Pending, torch.Tensor, Window]]] = {}
            for e in entries:
                assert e.pixels is not None and e.window is not None  # decoded; a window per transform
                by_size.setdefault((e.window.height, e.window.width), []).append((e, e.pixels, e.window))
            for size, group in by_size.items():
                out = resize_batch([pixels for _, pixels, _ in group], [window for _, _, window in group],
                                   size, self.transform.output)
                for (e, _, _), image in zip(group, out):
                    e.sample.tensor = image.permute(1, 2, 0)
        self.policy.stats.add_times(decode_gpu=time.perf_counter() - started)
        return [e.sample for e in entries]
