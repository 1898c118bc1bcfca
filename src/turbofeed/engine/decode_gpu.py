"""decode.gpu: CPU threads only read bytes and choose crop windows; each batch is decoded
in one nvJPEG call and cropped, resized, flipped and normalised in one batched op on the
device. Imported only when a decoder is in use (needs torch).

Images the GPU decoder rejects (CMYK, unusual sampling) are decoded on the CPU and
counted in ``stats.errors["gpu_fallback"]``; images nobody can decode go through the
usual bad-sample policy, so batch shapes and step counts stay as on the CPU path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from ..base.stageinfo import StageInfo
from ..decode.orientation import upright_chw
from ..plan import EpochPlan
from ..transforms import Compose, Window
from ..transforms.batched import to_device
from .gpu import cpu_decode, decode_job, decode_stream, header_window, refuse_damage, resize_batch, side_stream
from .policy import PassPolicy
from .work import SampleWork

if TYPE_CHECKING:
    from .stream import Job


class BatchDecoder(Protocol):
    """What the GPU stage needs from a decoder (``turbofeed.decode.gpu.GpuDecoder`` or your own)."""

    device: torch.device

    def decode(self, datas: list[bytes]) -> list[torch.Tensor | None]: ...

    # Optional: ``decode_tensors(list of 1-D uint8 CPU tensors) -> list of tensors or None``,
    # JPEGs whose headers the loader read natively (not CMYK/YCCK, under the pixel limit);
    # the per-chunk path (:mod:`turbofeed.engine.gpu_chunks`) then hands it views of its
    # buffers and skips a bytes view per image.


@dataclass(slots=True)
class Encoded:
    """One sample as the worker threads leave it: id, bytes, window (None without a
    transform), label; pixels once decoded; the EXIF orientation still to apply to them
    (1: none, or already upright)."""

    gid: int
    data: bytes | memoryview | np.ndarray
    window: Window | None
    label: int
    pixels: torch.Tensor | None = None
    orientation: int = 1


class GpuDecode:
    """The GPU choice of the decode stage, for one pass.

    Args:
        decoder: ``device`` and ``decode(list of bytes) -> list of (3, H, W) uint8
            tensors or None``.
        work, transform, plan, policy: the pass's sample loader, transform (or None),
            plan and bad-sample policy (shared with the worker threads).
        batch_size: positions per batch.
        stacked: :meth:`finish` gives the batch as one ``(images, labels)`` pair (the
            transform has one output size: the DataLoader), else :meth:`samples` (the Pipeline).
        channels_last: NHWC memory order for stacked batches.
    """

    info = StageInfo("decode.gpu", "sample+batch", ("fetch", "decode.gpu", "errors.gpu_fallback"), per_task=8)

    def __init__(self, decoder: BatchDecoder, work: SampleWork, transform: Compose | None, plan: EpochPlan,
                 policy: PassPolicy, *, batch_size: int, stacked: bool = True, channels_last: bool = False) -> None:
        self.decoder = decoder
        self.work = work
        self.transform = transform
        self.plan = plan
        self.policy = policy
        self.batch_size = batch_size
        self.stacked = stacked
        self.channels_last = channels_last
        self.device = torch.device(decoder.device)
        cuda = self.device.type == "cuda"
        self.stream = side_stream(self.device) if cuda else None
        self.decode_stream = decode_stream(self.device) if cuda else None
        if stacked:  # one batch ahead on a thread of its own: the decode overlaps the consumer's step
            self.info = replace(self.info, ahead=True)

    # -- worker side -------------------------------------------------------------------
    def acquire(self) -> list[Any]:
        return [None] * self.batch_size

    def fill(self, gid: int, buffer: list[Any], j: int) -> None:
        """Fetch the bytes and, with a transform, choose the window from the header."""
        data = self.work.fetch(gid)
        tag = self.work.orientation(data)
        if self.transform is None:
            refuse_damage(self.work, gid, data)  # as header_window does with a transform
            window = None
        else:
            window = header_window(self.work, gid, data, self.transform, tag)
        buffer[j] = Encoded(gid, data, window, int(self.work.dataset.labels[gid]), orientation=tag)

    # -- the consumer's side -------------------------------------------------------------
    def decode(self, job: Job, entries: list[Any], positions: Sequence[int]) -> list[Encoded]:
        """Decode ``positions`` of the job in one decoder call, the CPU taking what the GPU
        refuses; the entries that hold a sample, in order, each with ``pixels`` set."""
        return [entries[i] for i in self.decoded(job, entries, positions)]

    def decoded(self, job: Job, entries: list[Any], positions: Sequence[int]) -> list[int]:
        """:meth:`decode`, returning the positions that hold a sample."""
        def refill(gid: int, i: int) -> None:  # an image the GPU refused, decoded on the CPU
            data, window, pixels = cpu_decode(self.work, gid, self.transform, self.device)
            entries[i] = Encoded(gid, data, window, int(self.work.dataset.labels[gid]), pixels)

        kept = decode_job(self.decoder, job, self.plan, self.policy, refill, entries, positions)
        for i in kept:
            e = entries[i]
            if e.orientation != 1:  # decoded as stored: turn it upright (the CPU refill already is)
                e.pixels, e.orientation = upright_chw(e.pixels, e.orientation), 1
        return kept

    def finish(self, job: Job) -> Any:
        """The whole batch as ``(images, labels)`` on the device (``stacked``), made on a side
        stream the consumer's stream then waits for; else its :meth:`samples`."""
        if not self.stacked:
            return self.samples(job)
        return self.complete(job, self.prepare(job))

    def prepare(self, job: Job) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """A stacked batch decoded and resized on the side stream, both steps in this
        thread: ``(done event, images, labels)``."""
        return self.resize_ahead(job, self.decode_ahead(job))

    def decode_ahead(self, job: Job) -> tuple[float, Any, Any]:
        """Step 1 of :meth:`prepare` (any thread: the engine runs it ahead of the consumer,
        :mod:`turbofeed.engine.ahead`): the batch decoded on the decode stream
        (:func:`~turbofeed.engine.gpu.decode_stream`, synchronised first: what it still
        runs may use blocks the decoder is given); ``(its seconds, what
        :meth:`resize_ahead` takes, the event that marks its end)``."""
        started = time.perf_counter()
        with _SideStream(self.decode_stream) as decoded_done:
            if self.decode_stream is not None:
                self.decode_stream.synchronize()
            decoded = self.decode_part(job, job.slot, range(len(job)))
        return time.perf_counter() - started, decoded, decoded_done

    def resize_ahead(self, job: Job, step: tuple[float, Any, Any]) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Step 2 (another thread, while the next batch's step 1 runs): the batched resize
        and the labels on the side stream, after the decode stream's work; ``(done
        event, images, labels)``."""
        seconds, decoded, decoded_done = step
        started = time.perf_counter()
        with self.on_side_stream() as done:
            side = self.stream
            if decoded_done is not None and side is not None:
                side.wait_event(decoded_done)
                for t in self.device_tensors(decoded):  # freed blocks wait for the side stream's reads
                    t.record_stream(side)
            images, labels = self.resize_part(decoded)
        self.policy.stats.add_times(decode_gpu=seconds + time.perf_counter() - started)
        return done, images, labels

    def complete(self, job: Job, prepared: tuple[Any, torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """In the consumer's thread: its stream waits for :meth:`prepare`'s work."""
        done, images, labels = prepared
        self.hand_over(done, images, labels)
        return images, labels

    def batch(self, job: Job, entries: Any, positions: range,
              started: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode and augment ``positions`` of a batch in one call each (both steps in this
        thread, on the current stream: the hybrid stage's GPU share). The stream is
        synchronised first: the decoder may be given blocks its queued work still uses
        (:func:`~turbofeed.engine.gpu.decode_stream` says why)."""
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        out = self.resize_part(self.decode_part(job, entries, positions))
        self.policy.stats.add_times(decode_gpu=time.perf_counter() - started)
        return out

    def decode_part(self, job: Job, entries: Any, positions: range) -> Any:
        """``positions`` of the batch decoded: the entries that hold a sample, pixels set."""
        return self.decode(job, entries, positions)

    def device_tensors(self, decoded: Any) -> list[torch.Tensor]:
        """What :meth:`resize_part` reads of :meth:`decode_part`'s result on the device."""
        return [e.pixels for e in decoded]

    def resize_part(self, decoded: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`decode_part`'s entries cropped, resized, flipped and normalised in one
        batched op, and their labels, on the device."""
        transform = self.transform
        assert transform is not None and transform.size is not None  # stacked batches have one size
        kept: list[Encoded] = decoded
        if kept:
            out = resize_batch([e.pixels for e in kept], [e.window for e in kept],  # type: ignore[misc]
                               transform.size, transform.output, self.channels_last)
        else:  # every sample of this part was skipped
            out = self.empty_batch()
        labels = to_device(torch.tensor([e.label for e in kept], dtype=torch.int64), self.device)
        return out, labels

    def empty_batch(self) -> torch.Tensor:
        """The batch of a part whose every sample was skipped."""
        transform = self.transform
        assert transform is not None and transform.size is not None
        dtype = torch.uint8 if transform.output is None else getattr(torch, transform.output.torch_dtype)
        return torch.empty((0, 3, *transform.size), dtype=dtype, device=self.device)

    def samples(self, job: Job) -> list[tuple[Encoded, torch.Tensor]]:
        """Each sample of the batch with its (H, W, 3) tensor on the device, in order (the
        Pipeline's shape: sizes may differ; one batched op per output size)."""
        started = time.perf_counter()
        kept = self.decode(job, job.slot, range(len(job)))
        out: dict[int, torch.Tensor] = {}
        if self.transform is None:
            for e in kept:  # a view of the decoder's own tensor
                assert e.pixels is not None  # decode() returns decoded entries only
                out[id(e)] = e.pixels.permute(1, 2, 0)
        else:
            by_size: dict[tuple[int, int], list[Encoded]] = {}
            for e in kept:
                assert e.window is not None  # a window per transform
                by_size.setdefault((e.window.height, e.window.width), []).append(e)
            for size, group in by_size.items():
                images = resize_batch([e.pixels for e in group], [e.window for e in group],  # type: ignore[misc]
                                      size, self.transform.output)
                for e, image in zip(group, images):
                    out[id(e)] = image.permute(1, 2, 0)
        self.policy.stats.add_times(decode_gpu=time.perf_counter() - started)
        return [(e, out[id(e)]) for e in kept]

    # -- streams -----------------------------------------------------------------------
    def on_side_stream(self) -> Any:
        """A context running device work on the stage's side stream; yields the event
        that marks its end (None on a CPU stand-in device)."""
        return _SideStream(self.stream)

    def hand_over(self, done: Any, *tensors: torch.Tensor) -> None:
        """The consumer's stream waits for the side stream's work on ``tensors``."""
        if done is None:
            return
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(done)
        for t in tensors:
            t.record_stream(consumer)

    def close(self) -> None:
        pass


class _SideStream:
    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.done: Any = None
        self._ctx: Any = None

    def __enter__(self) -> Any:
        if self.stream is None:
            return None
        self._ctx = torch.cuda.stream(self.stream)
        self._ctx.__enter__()
        self.done = torch.cuda.Event()
        return self.done

    def __exit__(self, *exc: object) -> None:
        if self.stream is not None:
            self.done.record(self.stream)
            self._ctx.__exit__(*exc)
