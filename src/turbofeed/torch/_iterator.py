"""One pass of a :class:`turbofeed.DataLoader` over (the rest of) an epoch.

The loader creates one per ``iter(loader)`` and keeps the epoch bookkeeping; the pass
reports each delivered batch and the end of its epoch to it, and only while it is the
loader's current pass (a superseded pass raises instead of yielding anything).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..pipeline.buffers import Slot, SlotPool
from ..pipeline.stream import BatchStream, Fill, Job
from ..pipeline.work import SampleWork
from ..plan import make_epoch_plan
from .device import CudaDelivery, apply_output
from .gpu_path import GpuPath
from .hybrid import HybridSlot

if TYPE_CHECKING:
    from .loader import DataLoader

SUPERSEDED = ("turbofeed: this DataLoader iterator was superseded by a newer iter(loader) on the same "
              "loader (each iter() starts a new pass); keep using the newest iterator")


class _LoaderIterator:
    """One pass over the rest of an epoch. Closing it (or dropping it) stops its threads.

    Args:
        loader: the loader whose pass this is.
        epoch: the epoch to run.
        start: samples of the epoch's global order consumed before this pass (non-zero
            only when resuming).
    """

    def __init__(self, loader: DataLoader, epoch: int, start: int) -> None:
        self.loader = loader
        self.epoch = epoch
        self.owner = threading.current_thread()
        self.done = False  # finished, closed or failed: nothing more will come
        self.superseded = False
        self.delivered = 0  # batches of this pass handed out
        transform = loader.transform
        # the transform when every output has one size (batches then fill preallocated slots)
        fixed_transform = transform if transform is not None and transform.size is not None else None
        fixed = fixed_transform is not None
        # On a GPU the uint8 batch crosses PCIe and is normalised there (4x fewer bytes).
        self.device_output = fixed_transform.output if (fixed_transform is not None and loader.device is not None) \
            else None
        worker_transform = transform
        if fixed_transform is not None and self.device_output is not None:
            worker_transform = fixed_transform.without_output()
        plan = make_epoch_plan(loader.dataset.num_samples, batch_size=loader.batch_size, seed=loader.seed,
                               epoch=epoch, shuffle=loader.shuffle, rank=loader.rank,
                               world_size=loader.world_size, drop_last=loader.drop_last, start=start)
        self.batches = len(plan)
        policy = loader._policy.for_pass()  # shared by this pass's threads and GPU path
        work = SampleWork(loader.dataset, worker_transform, loader.stats, seed=loader.seed, epoch=epoch)
        self.fixed = fixed
        # bfloat16 output: host slots hold float32 (NumPy has no bfloat16), cast on delivery
        spec = worker_transform.output if fixed and worker_transform is not None else None
        self.host_cast = None if spec is None or spec.torch_dtype == spec.dtype.name else getattr(torch, spec.torch_dtype)
        self.gpu: GpuPath | None = None
        self.pool: SlotPool | None = None
        fill: Fill
        acquire: Callable[[], Any]
        # a GPU decoder is only made for a transform of one output size (fixed_transform)
        if loader._gpu_decoder is not None and fixed_transform is not None:
            host_slots = None
            if loader._hybrid is not None:  # CPU samples: uint8 NCHW, normalised on the device
                host_slots = loader._slot_pool(np.dtype(np.uint8), channels_last=False)
                work = SampleWork(loader.dataset, fixed_transform.without_output(), loader.stats,
                                  seed=loader.seed, epoch=epoch)
            gpu = self.gpu = GpuPath(loader._gpu_decoder, work, fixed_transform, plan, policy,
                                     loader.channels_last, hybrid=loader._hybrid, host_slots=host_slots)
            self.device_output = None
            fill = gpu.fill
            batch_size = loader.batch_size

            def gpu_acquire() -> list | HybridSlot:  # holds the GpuPath, not this iterator
                return gpu.acquire(batch_size)
            acquire = gpu_acquire
        elif fixed_transform is not None:
            dtype = np.dtype(np.uint8) if spec is None else spec.dtype  # spec: worker_transform.output
            pool = loader._slot_pool(dtype)
            channels_first = not loader.channels_last

            def slot_fill(gid: int, slot: Slot, j: int) -> None:
                work.into_slot(gid, slot, j, channels_first=channels_first)
            fill, acquire = slot_fill, pool.acquire
            self.pool = pool
        else:
            batch_size = loader.batch_size

            def list_fill(gid: int, slot: list, j: int) -> None:
                sample = work.load(gid)
                pixels = sample.pixels[:, ::-1] if sample.flip else sample.pixels
                slot[j] = (np.ascontiguousarray(pixels.transpose(2, 0, 1)), sample.label)

            def list_acquire() -> list:
                return [None] * batch_size
            fill, acquire = list_fill, list_acquire
        self.stream = BatchStream(plan, fill, acquire, policy, num_workers=loader.num_threads,
                                  prefetch=loader.prefetch)
        on_gpu = loader.device is not None and loader.device.type == "cuda" and self.gpu is None
        self.cuda = CudaDelivery(loader.device) if on_gpu else None
        self._held: tuple[Slot, Any] | None = None  # slot whose async copy may still run

    def __iter__(self) -> "_LoaderIterator":
        return self

    def __next__(self) -> tuple[Any, ...]:
        if self.superseded:
            raise RuntimeError(SUPERSEDED)
        self._release_held()
        if self.delivered == self.batches:
            self._finish()  # an empty pass (resumed at the very end) finishes at once
            raise StopIteration
        try:
            job = next(self.stream)
        except BaseException:  # StopIteration after close(), or an error from the workers
            self.done = True
            raise
        batch: tuple[Any, ...] = self._to_tensors(job)
        if self.loader.return_keys:
            batch = (*batch, self._keys(job))
        self.delivered = job.index + 1
        self.loader._advance(self)
        if self.delivered == self.batches:
            # The epoch is delivered even if nobody asks for one more (zip(range(len(loader)), loader)).
            self._finish()
        stats = self.loader.stats
        stats.count("batches")
        stats.count("samples", len(batch[1]))
        return batch

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.stream.close()  # the threads have nothing left to do
            self.loader._finish_epoch(self)

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
            assert self.pool is not None  # fixed-size batches are slots of the pool
            self.pool.release(slot)  # reused only once the caller drops these tensors
        return images, labels

    def _release_held(self) -> None:
        if self._held is not None:
            slot, done = self._held
            done.synchronize()  # the host slot is free once its copy to the GPU finished
            assert self.pool is not None  # only slots of the pool are held
            self.pool.release(slot)
            self._held = None

    def supersede(self) -> None:
        """A newer ``iter(loader)`` took over: stop, and raise on any later use."""
        self.superseded = True
        self.close()

    def close(self) -> None:
        """Stop the threads and give the slots back; idempotent."""
        self.done = True
        self.stream.close()
        self._release_held()
        if self.gpu is not None and self.gpu.host_slots is not None:
            self.gpu.release_held()

    def __del__(self) -> None:
        stream = getattr(self, "stream", None)  # absent if __init__ failed
        if stream is not None:
            stream.close()
