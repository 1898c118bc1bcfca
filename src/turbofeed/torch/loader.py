"""``turbofeed.DataLoader``: tar shards or image folders to (images, labels) tensors."""

from __future__ import annotations

import logging
import os
import warnings
import weakref
from typing import Any, Iterator

import numpy as np
import torch

from ..io import Dataset
from ..io.paths import PathSpec
from ..io.s3config import S3Config
from ..pipeline.buffers import Slot, SlotPool, make_array
from ..pipeline.policy import ErrorPolicy
from ..pipeline.stats import Stats
from ..pipeline.stream import BatchStream, Job
from ..pipeline.work import SampleWork
from ..plan import check_state, count_batches, make_epoch_plan, make_state, plan_fingerprint
from ..transforms import Compose
from .device import CudaDelivery, apply_output, gpu_available
from .env import detect
from .gpu_path import GpuPath
from .hybrid import HybridSplit

log = logging.getLogger("turbofeed")


class DataLoader:
    """Iterate (images, labels) batches of a WebDataset tar or ImageFolder dataset.

    Args:
        data: a path, a list, a brace pattern (``shard-{000000..000146}.tar``), a glob,
            a folder of ``.tar`` shards, or an ImageFolder root.
        batch_size: samples per batch.
        num_workers: worker threads (decode and resize release the GIL).
        shuffle: shuffle each epoch; the order is a pure function of (seed, epoch).
        seed: the seed of the order and of the random augmentations.
        drop_last: drop the last partial batch (and, distributed, the uneven tail).
        transform: a :class:`turbofeed.transforms.Compose` (or a list of its ops). With
            a fixed output size, images come as one ``(N, 3, H, W)`` tensor, uint8 unless
            the transform ends with ``Normalize``/``ToDtype``; without one, as a list of
            ``(3, H, W)`` uint8 tensors.
        enable_distributed: split the data across ranks; rank and world size come from
            ``rank``/``world_size``, else torch.distributed, torchrun, SLURM, Horovod or
            MPI variables.
        rank, world_size: explicit distributed position.
        device: None or ``"cpu"`` for CPU tensors; ``"cuda"``/``"cuda:N"`` to deliver on
            the GPU (uint8 copied asynchronously, normalised there).
        pin_memory: page-locked host batches; default: when delivering to CUDA.
        channels_last: images in NHWC memory order (shape still NCHW).
        prefetch: batches decoded ahead of the one being consumed.
        on_error: ``"replace"`` (default), ``"skip"`` or ``"raise"``: see
            :class:`turbofeed.pipeline.ErrorPolicy`. With ``"raise"`` a damaged tar
            also raises at construction.
        gpu_decode: ``True`` decodes each batch with nvJPEG in one call on ``device``
            (default ``cuda``) and crops/resizes/normalises it there in one batched op;
            threads only read bytes and pick crop windows. Without a GPU or a decoder
            backend it falls back to the CPU path with one warning; images the GPU
            rejects are decoded on the CPU. Both are counted in
            ``stats.errors["gpu_fallback"]``. Also accepts a decoder object with
            ``device`` and ``decode(list[bytes]) -> list[tensor | None]``.
        hybrid: with ``gpu_decode``, split every batch between the GPU decoder and the
            CPU threads in proportion to the speed each has shown (timed per batch,
            smoothed), so neither waits for the other; ``hybrid_share`` is the GPU's
            current fraction. The CPU part is decoded into pinned uint8 host slots,
            copied over and normalised on the device like the GPU part.
        cache_dir: where tar indexes are cached (default ``~/.cache/turbofeed``).
        format: what every path is (``"tar"``, ``"folder"``, ``"hdf5"``, ``"zarr"``, ``"npy"``,
            ``"parquet"``) when its extension does not say; see ``docs/formats.md``.
        format_options: names of the images/labels/keys datasets, arrays or columns in
            HDF5, Zarr, .npy and Parquet sources, e.g. ``{"images": "img", "labels": "y"}``.
        s3: endpoint, credentials, cache and retry settings for ``s3://`` paths (a
            :class:`turbofeed.io.s3client.S3Config`; default: the AWS variables and profile).
        return_keys: yield ``(images, labels, keys)``, keys being the sample keys
            (``shard-000003.tar/00001234``) actually delivered, replacements included.

    Example::

        loader = turbofeed.DataLoader("data/shard-{000000..000009}.tar", batch_size=256,
                                      shuffle=True, transform=turbofeed.transforms.imagenet_train(224))
        for epoch in range(3):
            loader.set_epoch(epoch)
            for images, labels in loader:   # uint8 (256, 3, 224, 224), int64 (256,)
                ...
    """

    def __init__(self, data: PathSpec, batch_size: int = 64, num_workers: int = 4, shuffle: bool = False,
                 *, seed: int = 0, drop_last: bool = False, transform: Compose | list | None = None,
                 enable_distributed: bool = False, rank: int | None = None, world_size: int | None = None,
                 device: str | torch.device | None = None, pin_memory: bool | None = None,
                 channels_last: bool = False, prefetch: int = 2, on_error: str = "replace",
                 gpu_decode: bool | Any = False, cache_dir: str | None = None, return_keys: bool = False,
                 format: str | None = None, format_options: dict | None = None, s3: S3Config | None = None,
                 hybrid: bool = False) -> None:
        self.stats = Stats()
        self._policy = ErrorPolicy(on_error, self.stats)
        if batch_size < 1 or num_workers < 1:
            raise ValueError(f"batch_size and num_workers must be >= 1, got {batch_size}, {num_workers}")
        self.dataset = Dataset(data, on_damage="raise" if on_error == "raise" else "skip",
                               cache_dir=cache_dir, format=format, format_options=format_options, s3=s3)
        self.stats.skipped_at_index = len(self.dataset.problems)
        self.stats.damaged_shards = list(self.dataset.damaged)
        if isinstance(transform, (list, tuple)):
            transform = Compose(transform)
        self.transform = transform
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.prefetch = prefetch
        self.channels_last = channels_last
        self.return_keys = return_keys
        if enable_distributed or rank is not None or world_size is not None:
            env = detect(rank, world_size)
        else:
            env = detect(0, 1)
        self.rank, self.world_size = env.rank, env.world_size
        self.device = None if device is None or str(device) == "cpu" else torch.device(device)
        if self.device is not None and self.device.type == "cuda" and not gpu_available():
            raise RuntimeError(f"device={device!r} but PyTorch sees no CUDA GPU; use device=None")
        self._gpu_decoder = self._gpu_decoder_for(gpu_decode)  # may move self.device to its GPU
        self.pin_memory = (self.device is not None) if pin_memory is None else pin_memory
        if self.pin_memory and not gpu_available():
            self.pin_memory = False  # page-locking needs the CUDA runtime
        # Lives across epochs: the speeds measured in one epoch set the next one's split.
        self._hybrid = HybridSplit(num_workers) if hybrid and self._gpu_decoder is not None else None
        # Where the epoch stands: the current plan begins after ``_start`` samples of the
        # global order (non-zero after an elastic resume) and ``_batches_done`` of its
        # batches were delivered; ``_batches_base`` carries a resumed state's count.
        self._epoch = 0
        self._start = 0
        self._batches_done = 0
        self._batches_base = 0
        self._fingerprint = plan_fingerprint(
            dataset=self.dataset.fingerprint_fields(), shuffle=shuffle, drop_last=drop_last)
        self._active: weakref.ref | None = None
        if len(self) == 0:
            raise ValueError(f"batch_size={batch_size} with drop_last=True leaves no batch: this rank "
                             f"has {self._per_rank()} samples")
        self._pools: dict[tuple, SlotPool] = {}

    def _gpu_decoder_for(self, gpu_decode: bool | Any) -> Any:
        """The batch decoder for ``gpu_decode``, or None (CPU path) with one warning saying why."""
        if gpu_decode is False or gpu_decode is None:
            return None
        if self.transform is None or self.transform.size is None:
            decoder, reason = None, "it needs a transform with a fixed output size"
        else:
            from ..decode.gpu import open_decoder

            decoder, reason = open_decoder(gpu_decode, self.device or "cuda")
        if decoder is None:
            warnings.warn(f"turbofeed: gpu_decode=True but {reason}; decoding on the CPU",
                          RuntimeWarning, stacklevel=3)
            self.stats.count_error("gpu_fallback")
            return None
        if torch.device(decoder.device).type == "cuda":
            self.device = torch.device(decoder.device)  # batches are born on the decoder's GPU
        return decoder

    # -- sizes -------------------------------------------------------------------------
    def _per_rank(self) -> int:
        n, w = self.dataset.num_samples, self.world_size
        return n // w if self.drop_last else -(-n // w)

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        return count_batches(self._per_rank(), self.batch_size, self.drop_last)

    @property
    def hybrid_share(self) -> float | None:
        """Fraction of each batch the GPU decodes in hybrid mode (None otherwise)."""
        return None if self._hybrid is None else self._hybrid.gpu_share()

    @property
    def num_samples(self) -> int:
        return self.dataset.num_samples

    @property
    def class_names(self) -> list[str] | None:
        return self.dataset.class_names

    # -- epochs and resume -------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` next (every rank must pass the same value).

        Calling it with the epoch the loader is at changes nothing, so the usual
        ``for epoch in range(start, n): loader.set_epoch(epoch)`` loop continues a
        resumed epoch where it stopped. Another epoch starts from its first batch (a
        finished epoch asked for again runs again). Without ``set_epoch``, each finished
        epoch moves the loader to the next one, reshuffled.
        """
        if epoch != self._epoch:
            self._start = self._batches_done = self._batches_base = 0
        self._epoch = int(epoch)

    @property
    def samples_done(self) -> int:
        """Prefix of this epoch's global order consumed by all ranks together."""
        done = self._start + self._batches_done * self.batch_size * self.world_size
        return min(self.dataset.num_samples, done)

    def state_dict(self) -> dict:
        """Where the next iteration starts: a small JSON-safe dict (see ``load_state_dict``)."""
        return make_state(epoch=self._epoch, samples_done=self.samples_done,
                          batches_done=self._batches_base + self._batches_done, seed=self.seed,
                          world_size=self.world_size, plan=self._fingerprint)

    def load_state_dict(self, state: dict) -> None:
        """Continue where ``state`` was taken: the next iteration yields the rest of that epoch.

        With the world size (and batch size) of the run that saved it, the batches are
        exactly those an uninterrupted run would have produced. With another world size
        (elastic), the rest of the epoch's global order is split over the new ranks: no
        sample is repeated or lost, only the grouping into batches differs.

        Raises:
            ValueError: naming the field that does not match (version, seed, or ``plan``
                when the dataset, shuffle or drop_last changed).
        """
        check_state(state, seed=self.seed, plan=self._fingerprint)
        if state["world_size"] != self.world_size:
            log.info("turbofeed: elastic resume of epoch %d at sample %d: world size %d -> %d",
                     state["epoch"], state["samples_done"], state["world_size"], self.world_size)
        self._epoch = state["epoch"]
        self._start = min(state["samples_done"], self.dataset.num_samples)
        self._batches_done = 0
        self._batches_base = state["batches_done"] if state["world_size"] == self.world_size else 0

    def _finish_epoch(self, epoch: int) -> None:
        """A pass reached the end of ``epoch``: the next iteration runs the next epoch."""
        if self._epoch == epoch:
            self._epoch = epoch + 1
            self._start = self._batches_done = self._batches_base = 0

    # -- iteration ---------------------------------------------------------------------
    def _slot_pool(self, output_dtype: np.dtype, channels_last: bool | None = None) -> SlotPool:
        h, w = self.transform.size
        last = self.channels_last if channels_last is None else channels_last
        shape = (self.batch_size, h, w, 3) if last else (self.batch_size, 3, h, w)

        def make() -> Slot:
            return Slot(make_array(shape, output_dtype, self.pin_memory),
                        np.empty(self.batch_size, dtype=np.int64))
        key = (shape, output_dtype.name)
        if key not in self._pools:
            self._pools[key] = SlotPool(make, capacity=self.prefetch + 2)
        return self._pools[key]

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        previous = self._active() if self._active else None
        if previous is not None:
            previous.close()  # one live iteration per loader, like a torch DataLoader
        it = _LoaderIterator(self)
        self._active = weakref.ref(it)
        return it

    def profile(self) -> str:
        """Seconds per stage so far, biggest first: where the time goes."""
        return self.stats.profile()

    def close(self) -> None:
        previous = self._active() if self._active else None
        if previous is not None:
            previous.close()
        self.dataset.close()

    def __repr__(self) -> str:
        return (f"DataLoader(samples={self.num_samples}, batches={len(self)}, batch_size={self.batch_size}, "
                f"rank={self.rank}/{self.world_size}, workers={self.num_workers}, transform={self.transform!r})")


class _LoaderIterator:
    """One pass over the rest of an epoch. Closing it (or dropping it) stops its threads."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.epoch = loader._epoch
        transform = loader.transform
        fixed = transform is not None and transform.size is not None
        # On a GPU the uint8 batch crosses PCIe and is normalised there (4x fewer bytes).
        self.device_output = transform.output if (fixed and loader.device is not None) else None
        worker_transform = transform if self.device_output is None else transform.without_output()
        plan = make_epoch_plan(loader.dataset.num_samples, batch_size=loader.batch_size, seed=loader.seed,
                               epoch=self.epoch, shuffle=loader.shuffle, rank=loader.rank,
                               world_size=loader.world_size, drop_last=loader.drop_last,
                               start=loader._start)
        work = SampleWork(loader.dataset, worker_transform, loader.stats, seed=loader.seed, epoch=self.epoch)
        self.fixed = fixed
        # bfloat16 output: host slots hold float32 (NumPy has no bfloat16), cast on delivery
        spec = worker_transform.output if fixed and worker_transform is not None else None
        self.host_cast = None if spec is None or spec.torch_dtype == spec.dtype.name else getattr(torch, spec.torch_dtype)
        self.gpu = None
        if loader._gpu_decoder is not None:
            host_slots = None
            if loader._hybrid is not None:  # CPU samples: uint8 NCHW, normalised on the device
                host_slots = loader._slot_pool(np.dtype(np.uint8), channels_last=False)
                work = SampleWork(loader.dataset, transform.without_output(), loader.stats, seed=loader.seed,
                                  epoch=self.epoch)
            self.gpu = GpuPath(loader._gpu_decoder, work, transform, plan, loader._policy, loader.channels_last,
                               hybrid=loader._hybrid, host_slots=host_slots)
            self.device_output = None
            fill = self.gpu.fill

            def acquire() -> list:
                return self.gpu.acquire(loader.batch_size)
            self.pool = None
        elif fixed:
            dtype = np.dtype(np.uint8) if worker_transform.output is None else worker_transform.output.dtype
            pool = loader._slot_pool(dtype)
            channels_first = not loader.channels_last

            def fill(gid: int, slot: Slot, j: int) -> None:
                work.into_slot(gid, slot, j, channels_first=channels_first)
            acquire = pool.acquire
            self.pool = pool
        else:
            def fill(gid: int, slot: list, j: int) -> None:
                sample = work.load(gid)
                pixels = sample.pixels[:, ::-1] if sample.flip else sample.pixels
                slot[j] = (np.ascontiguousarray(pixels.transpose(2, 0, 1)), sample.label)

            def acquire() -> list:
                return [None] * loader.batch_size
            self.pool = None
        self.stream = BatchStream(plan, fill, acquire, loader._policy, start=loader._batches_done,
                                  num_workers=loader.num_workers, prefetch=loader.prefetch)
        on_gpu = loader.device is not None and loader.device.type == "cuda" and self.gpu is None
        self.cuda = CudaDelivery(loader.device) if on_gpu else None
        self._held: tuple[Slot, Any] | None = None  # slot whose async copy may still run

    def __iter__(self) -> "_LoaderIterator":
        return self

    def __next__(self) -> tuple[Any, ...]:
        self._release_held()
        if self.loader._epoch != self.epoch:
            self.close()  # set_epoch was called mid-epoch: this pass is over
            raise StopIteration
        try:
            job = next(self.stream)
        except StopIteration:
            if self.stream.finished:
                self.loader._finish_epoch(self.epoch)
            raise
        batch = self._to_tensors(job)
        if self.loader.return_keys:
            batch = (*batch, self._keys(job))
        self.loader._batches_done = job.index + 1
        stats = self.loader.stats
        stats.count("batches")
        stats.count("samples", len(batch[1]))
        return batch

    def _keys(self, job: Job) -> list[str]:
        dataset = self.loader.dataset
        keys = []
        for gid in job.ids[job.ok]:
            shard, key = dataset.describe(int(gid))
            keys.append(f"{os.path.basename(shard)}/{key}")
        return keys

    def _to_tensors(self, job: Job) -> tuple[Any, Any]:
        if self.gpu is not None:
            return self.gpu.to_tensors(job)
        keep = np.flatnonzero(job.ok)  # fewer only under on_error="skip"
        if not self.fixed:
            items = [job.slot[i] for i in keep]
            return ([torch.from_numpy(img) for img, _ in items],
                    torch.tensor([label for _, label in items], dtype=torch.int64))
        slot: Slot = job.slot
        n = len(job)
        if len(keep) < n:
            slot.images[:len(keep)] = slot.images[keep]
            slot.labels[:len(keep)] = slot.labels[keep]
            n = len(keep)
        images = torch.from_numpy(slot.images[:n])
        labels = torch.from_numpy(slot.labels[:n].copy())
        if self.loader.channels_last:
            images = images.permute(0, 3, 1, 2)  # NCHW shape over NHWC memory
        if self.host_cast is not None:
            images = images.to(self.host_cast)  # a copy: the slot is free again at once
        if self.cuda is not None:
            images, labels, done = self.cuda.copy(images, labels, self.device_output)
            self._held = (slot, done)
        else:
            images = apply_output(images, self.device_output)
            self.pool.release(slot)  # reused only once the caller drops these tensors
        return images, labels

    def _release_held(self) -> None:
        if self._held is not None:
            slot, done = self._held
            done.synchronize()  # the host slot is free once its copy to the GPU finished
            self.pool.release(slot)
            self._held = None

    def close(self) -> None:
        self.stream.close()
        if self.gpu is not None and self.gpu.host_slots is not None:
            self.gpu.release_held()

    def __del__(self) -> None:
        self.stream.close()
