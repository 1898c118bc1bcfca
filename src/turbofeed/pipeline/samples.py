"""``turbofeed.Pipeline``: the sample-level API (``start / next_batch(n) / stop``)."""

from __future__ import annotations

import warnings
import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..decode import decode
from ..io import Dataset
from ..io import PathSpec
from ..io import S3Config
from ..plan import make_epoch_plan
from ..transforms import Compose, write_slot
from ..transforms.output import OutputSpec
from .policy import ErrorPolicy
from .stats import Stats
from .stream import BatchStream
from .work import Decoded, SampleWork

_CHUNK = 32  # samples per unit of work inside the pipeline; next_batch(n) regroups them


@dataclass
class Sample:
    """One sample: ``key``, ``label`` (-1 if none), ``shard``, and its image.

    ``data`` holds the encoded bytes (the uint8 pixels for the array formats: HDF5,
    Zarr, .npy) when the pipeline does not decode (``decode_jpeg=False``);
    ``get_image()`` then decodes on demand. ``tensor`` holds
    the (H, W, 3) torch tensor on the decoder's device when the pipeline decoded on the
    GPU (``gpu_decode``); with a transform it is a view of its chunk's batched output.
    """

    key: str
    label: int
    shard: str
    data: bytes | np.ndarray | None = field(default=None, repr=False)
    image: np.ndarray | None = field(default=None, repr=False)
    tensor: Any = field(default=None, repr=False)

    def get_image(self) -> np.ndarray:
        """The image as HWC uint8 RGB (float if the pipeline's transform normalises).

        A GPU-decoded sample copies its ``tensor`` to the host once (device to host)."""
        if self.image is None:
            if self.tensor is not None:
                self.image = np.ascontiguousarray(self.tensor.cpu().numpy())
            elif self.data is None:
                raise ValueError(f"sample {self.shard}/{self.key} has no image data")
            else:
                self.image = decode(self.data)
        return self.image

    def get_gpu_tensor(self, device: Any = None) -> Any:
        """The image as a torch tensor (H, W, 3) on the GPU.

        Decoded on the GPU (``gpu_decode``): the pipeline's own ``tensor``, no host round
        trip (moved only if ``device`` names another device). Decoded on the CPU: the
        image copied to ``device`` (default ``"cuda"``), which needs PyTorch with a GPU.

        Raises:
            RuntimeError: a CPU-decoded sample and no CUDA GPU.
        """
        if self.tensor is not None:
            return self.tensor if device is None else self.tensor.to(device)
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("get_gpu_tensor() needs a CUDA GPU; use get_image() on this machine")
        return torch.from_numpy(np.ascontiguousarray(self.get_image())).to(device or "cuda", non_blocking=False)


def _host_pixels(loaded: Decoded, output: OutputSpec | None) -> np.ndarray:
    """A CPU-decoded sample's HWC pixels: flipped, and converted when the transform ends
    with ``Normalize``/``ToDtype`` (as the GPU path's batched op does)."""
    if output is None:
        return np.ascontiguousarray(loaded.pixels[:, ::-1]) if loaded.flip else loaded.pixels
    out = np.empty(loaded.pixels.shape, output.dtype)
    write_slot(loaded.pixels, out, flip=loaded.flip, channels_first=False, output=output)
    return out


class Pipeline:
    """Read, decode and optionally transform samples with worker threads, in a fixed order.

    Args:
        tar_paths: anything :class:`turbofeed.DataLoader` accepts (tars, patterns, folders).
        num_workers: worker threads.
        decode_jpeg: decode images (else samples carry the encoded bytes).
        shuffle, seed: the order, a pure function of (seed, epoch).
        transform: optional :class:`turbofeed.transforms.Compose` applied per sample (images
            are float when it ends with ``Normalize``/``ToDtype``).
        on_error: ``"replace"``, ``"skip"`` or ``"raise"`` for bad samples.
        rank, world_size: this process's share of the data (strided split).
        gpu_decode: ``True`` decodes on GPU ``device_id`` with nvJPEG: threads only read
            bytes (and pick crop windows), each chunk of samples is decoded in one call
            and transformed there in one batched op, and ``Sample.get_gpu_tensor()``
            returns the result with no host round trip. A decoder object (``device`` and
            ``decode(list of bytes) -> list of (3, H, W) uint8 tensors or None``) is used
            as it is. Without a GPU or a backend: one ``RuntimeWarning`` saying why, one
            count in ``stats.errors["gpu_fallback"]``, and CPU decoding. An image the
            decoder refuses (CMYK, ...) is decoded on the CPU and counted there too; one
            nobody can decode goes through ``on_error``. Only with ``decode_jpeg``.
        device_id: the GPU for ``gpu_decode=True`` (``cuda:<device_id>``).
        s3: endpoint, credentials, cache and retry settings for ``s3://`` paths (a
            :class:`turbofeed.io.s3client.S3Config`; default: the AWS variables and profile).
        format, format_options: what the paths are and the names inside HDF5, Zarr, .npy
            and Parquet sources (as for :class:`turbofeed.DataLoader`).
        classes: class names in id order for labels given by name (as for
            :class:`turbofeed.DataLoader`).

    Example::

        pipe = turbofeed.Pipeline(tar_paths=["shard-000000.tar"], num_workers=4)
        pipe.start()
        while batch := pipe.next_batch(32):   # [] at the end of the epoch
            for s in batch:
                img = s.get_image()            # (H, W, 3) uint8
        pipe.stop()

        # gpu_decode=True: each sample's tensor is already on cuda:0
        pipe = turbofeed.Pipeline(shards, transform=T.imagenet_eval(224), gpu_decode=True, device_id=0)
        x = pipe.next_batch(32)[0].get_gpu_tensor()   # (224, 224, 3) uint8 CUDA tensor
    """

    def __init__(self, tar_paths: PathSpec, num_workers: int = 4, decode_jpeg: bool = True, *,
                 shuffle: bool = False, seed: int = 0, transform: Compose | list | None = None,
                 on_error: str = "replace", rank: int = 0, world_size: int = 1,
                 gpu_decode: bool | Any = False, device_id: int = 0, prefetch: int | None = None,
                 cache_dir: str | None = None, format: str | None = None,
                 format_options: dict | None = None, s3: S3Config | None = None,
                 classes: list[str] | None = None) -> None:
        self.stats = Stats()
        self._policy = ErrorPolicy(on_error, self.stats)
        self.dataset = Dataset(tar_paths, on_damage="raise" if on_error == "raise" else "skip",
                               cache_dir=cache_dir, format=format, format_options=format_options, s3=s3,
                               classes=classes)
        self.stats.skipped_at_index = len(self.dataset.problems)
        self.stats.damaged_shards = list(self.dataset.damaged)
        self.transform = Compose(transform) if isinstance(transform, (list, tuple)) else transform
        self.num_workers = num_workers
        self.decode_jpeg = decode_jpeg
        self.shuffle = shuffle
        self.seed = seed
        self.rank, self.world_size = rank, world_size
        self.gpu_decode, self.device_id = gpu_decode, device_id
        self.decoder = self._open_decoder(gpu_decode, device_id) if decode_jpeg else None
        self.prefetch = prefetch or max(2, num_workers)
        self.epoch = 0
        self._stream: BatchStream | None = None
        self._gpu: Any = None  # the epoch's GpuChunks when decoding on the GPU
        self._ready: deque[Sample] = deque()

    def _open_decoder(self, gpu_decode: bool | Any, device_id: int) -> Any:
        """The batch decoder for ``gpu_decode``, or None (CPU decoding) with one warning saying why."""
        if gpu_decode is False or gpu_decode is None:
            return None
        from ..decode.gpu import open_decoder

        decoder, reason = open_decoder(gpu_decode, f"cuda:{device_id}")
        if decoder is None:
            warnings.warn(f"turbofeed: gpu_decode=True but {reason}; decoding on the CPU",
                          RuntimeWarning, stacklevel=3)
            self.stats.count_error("gpu_fallback")
        return decoder

    def __len__(self) -> int:
        """Samples per epoch for this rank."""
        return len(make_epoch_plan(self.dataset.num_samples, batch_size=1, seed=self.seed, epoch=0,
                                   shuffle=False, rank=self.rank, world_size=self.world_size).order)

    def set_epoch(self, epoch: int) -> None:
        """Restart at the beginning of ``epoch`` (its own shuffle)."""
        self.stop()
        self.epoch = int(epoch)

    def start(self) -> None:
        """Start the worker threads for the current epoch (no-op if running). Shards
        changed on disk since they were indexed are re-indexed first."""
        if self._stream is not None:
            return
        if self.dataset.refresh():
            self.stats.damaged_shards = list(self.dataset.damaged)
            self.stats.skipped_at_index = len(self.dataset.problems)
        plan = make_epoch_plan(self.dataset.num_samples, batch_size=_CHUNK, seed=self.seed,
                               epoch=self.epoch, shuffle=self.shuffle, rank=self.rank,
                               world_size=self.world_size)
        work = SampleWork(self.dataset, self.transform, self.stats, seed=self.seed, epoch=self.epoch)
        policy = self._policy.for_pass()
        # The closures below run on the worker threads: they must not hold ``self``, or the
        # threads would keep a dropped Pipeline (and themselves) alive.
        dataset, decode_jpeg = self.dataset, self.decode_jpeg
        output = self.transform.output if self.transform is not None else None

        def make_sample(gid: int) -> Sample:
            shard, key = dataset.describe(gid)
            return Sample(key, int(dataset.labels[gid]), shard)

        def cpu_fill(gid: int, slot: list, j: int) -> None:
            sample = make_sample(gid)
            if decode_jpeg:
                sample.image = _host_pixels(work.load(gid), output)
            else:
                sample.data = work.fetch(gid)
            slot[j] = sample

        if self.decoder is not None:
            from ._gpu_samples import GpuChunks

            self._gpu = GpuChunks(self.decoder, work, self.transform, plan, policy, make_sample)
        fill = cpu_fill if self._gpu is None else self._gpu.fill
        self._stream = BatchStream(plan, fill, lambda: [None] * _CHUNK, policy,
                                   num_workers=self.num_workers, prefetch=self.prefetch,
                                   stage="fetch" if self._gpu is not None else "decode.cpu")
        # Dropped without stop() (or collected): the threads stop with it.
        self._finalizer = weakref.finalize(self, self._stream.close)

    def next_batch(self, n: int) -> list[Sample]:
        """Up to ``n`` next samples in order; fewer at the end; ``[]`` once the epoch is done.

        Raises:
            SampleError: a bad sample under ``on_error="raise"``.
        """
        if self._stream is None:
            self.start()
        stream = self._stream
        assert stream is not None  # start() made it
        while len(self._ready) < n:
            job = next(stream, None)
            if job is None:
                break
            if self._gpu is None:
                self._ready.extend(s for s, ok in zip(job.slot, job.ok) if ok and s is not None)
            else:
                try:
                    self._ready.extend(self._gpu.samples(job))
                except BaseException:  # as on the CPU path: the epoch ends here
                    stream.close()
                    raise
            self.stats.count("batches")
        out = [self._ready.popleft() for _ in range(min(n, len(self._ready)))]
        self.stats.count("samples", len(out))
        return out

    def __iter__(self) -> Iterator[Sample]:
        """Samples of the rest of the epoch, one by one."""
        while batch := self.next_batch(_CHUNK):
            yield from batch

    def stop(self) -> None:
        """Stop the worker threads; idempotent. The next ``next_batch`` starts the epoch over.

        A Pipeline dropped without ``stop()`` stops its threads when it is collected."""
        if self._stream is not None:
            self._finalizer()  # closes the stream, once
            self._stream = None
        self._gpu = None
        self._ready.clear()

    def __enter__(self) -> "Pipeline":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
