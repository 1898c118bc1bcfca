"""One pass of a :class:`turbofeed.DataLoader` over (the rest of) an epoch.

The loader creates one per ``iter(loader)`` and keeps the epoch bookkeeping; the pass
reports each delivered batch and the end of its epoch to it. Passes of one loader run
independently, each with its own epoch, position and threads (as torch's iterators);
``load_state_dict`` supersedes the running ones (they raise instead of yielding).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from ..base.stageinfo import StageInfo
from ..engine.build import PassOptions, build_pass
from ..engine.run import BatchStage
from ..engine.slots import Slot
from ..engine.stages import HostBatch, chw_with_label
from ..engine.stream import Job
from ..engine.usercode import call_on_batch, name_of
from .collate import collate, field_batch
from .device import CudaDelivery, apply_output

if TYPE_CHECKING:
    from .loader import DataLoader

SUPERSEDED = ("turbofeed: this DataLoader iterator was superseded by load_state_dict() on its loader (the "
              "next iter(loader) continues at the loaded position); iterate the loader again")


class _LoaderIterator:
    """One pass over the rest of an epoch. Closing it (or dropping it) stops its threads.

    The loader chooses nothing here beyond the engine's options: the decode stage comes
    from :func:`turbofeed.engine.choose.decode_stage`, and this pass adds the ``deliver``
    stage (host tensors, or an async copy to the GPU normalised there).

    Args:
        loader: the loader whose pass this is.
        epoch: the epoch to run.
        start: samples of the epoch's global order consumed before this pass (non-zero
            only when resuming).
        base: batches of the epoch delivered before this pass (a resumed state's count).
    """

    def __init__(self, loader: DataLoader, epoch: int, start: int, base: int = 0) -> None:
        self.loader = loader
        self.epoch = epoch
        self.start = start
        self.base = base
        self.owner = threading.current_thread()
        self.done = False  # finished, closed or failed: nothing more will come
        self.superseded = False
        self.delivered = 0  # batches of this pass handed out
        plan = loader.planner.plan(epoch, start)
        self.batches = len(plan)
        policy = loader._policy.for_pass()  # shared by this pass's threads and batch stages
        options = pass_options(loader)
        # On a GPU the uint8 batch crosses PCIe and is normalised there (4x fewer bytes).
        transform = loader.transform
        self.device_output = transform.output if transform is not None and device_normalises(loader, options) \
            else None
        if self.device_output is not None and options.transform is not None and not options.callables:
            options = replace(options, transform=options.transform.without_output())
        self.deliver = host_delivery(loader, options, self.device_output)
        self.engine = build_pass(options, plan, policy, epoch=epoch, then=batch_stages(loader, options, self.deliver))

    def __iter__(self) -> "_LoaderIterator":
        return self

    def __next__(self) -> tuple[Any, ...]:
        if self.superseded:
            raise RuntimeError(SUPERSEDED)
        self.deliver.release_held()
        if self.delivered == self.batches:
            self._finish()  # an empty pass (resumed at the very end) finishes at once
            raise StopIteration
        try:
            job, batch = next(self.engine)
        except StopIteration:
            if self.engine.finished:  # the last batches were dropped (a bucket without a good sample)
                self._finish()
            self.done = True
            raise
        except BaseException:  # StopIteration after close(), or an error from the stages
            self.done = True
            raise
        if self.loader.return_keys:
            batch = self._with_keys(batch, job)
        self.delivered = job.index + 1
        self.loader.book.advance(self)
        if self.delivered == self.batches:
            # The epoch is delivered even if nobody asks for one more (zip(range(len(loader)), loader)).
            self._finish()
        stats = self.loader.stats
        stats.count("batches")
        stats.count("samples", int(job.ok.sum()))  # what the batch holds, whatever shape collate gave it
        return batch

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.engine.close()  # the threads have nothing left to do
            self.loader.book.finish_epoch(self)

    def _with_keys(self, batch: Any, job: Job) -> Any:
        """``return_keys``: ``(images, labels, keys)``; a user collate's batch as
        ``(batch, keys)``, whatever it is (unpacking a stacked tensor into the tuple would
        bind its rows); a dict batch gets ``"__key__"`` (``fields=`` batches hold it)."""
        if isinstance(batch, dict):
            if "__key__" not in batch:
                batch["__key__"] = self._keys(job)
            return batch
        if self.loader.torch_args.collate_pairs is not None or self.loader.collate is not None:
            return batch, self._keys(job)
        return (*batch, self._keys(job))

    def _keys(self, job: Job) -> list[str]:
        dataset = self.loader.dataset
        return [dataset.sample_name(gid) for gid in job.ids[job.ok].tolist()]

    def supersede(self) -> None:
        """A newer ``iter(loader)`` took over: stop, and raise on any later use."""
        self.superseded = True
        self.close()

    def close(self) -> None:
        """Stop the threads and give the slots back; idempotent."""
        self.done = True
        self.engine.close()
        self.deliver.release_held()

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)  # absent if __init__ failed
        if engine is not None:
            engine.close()


def pass_options(loader: DataLoader) -> PassOptions:
    """The loader's options for its next pass (:func:`turbofeed.engine.build.build_pass`):
    batches fill preallocated slots where the transform has one output size (or
    aspect-ratio buckets sized by ``BucketResize``, one size per bucket); the GPU decoder
    only for those; the user's callables after the fused decode on the workers."""
    transform = loader.transform
    fixed = transform is not None and transform.size is not None
    decoder = loader._gpu_decoder if fixed else None  # only made for a fixed size anyway
    pool: Callable[..., Any] | None = loader._slot_pool if fixed else None
    if not fixed and loader.buckets is not None:
        pool = loader.buckets.slot_pool(transform, batch_size=loader.batch_size, pinned=loader._pinned,
                                        capacity=loader.prefetch + 2)
    callables = transform.callables if transform is not None else []
    return PassOptions(
        loader.dataset, loader.stats, loader.batch_size, loader.num_threads, prefetch=loader.prefetch,
        seed=loader.seed, transform=transform.fused() if callables and transform is not None else transform,
        fields=loader.fields, orient=loader.apply_exif_orientation, user_errors=loader.user_errors,
        channels_last=loader.channels_last, timeout=loader.torch_args.timeout, layout=loader.stream_layout,
        decoder=decoder, hybrid=loader._hybrid if decoder is not None else None, pool=pool,
        shape=chw_with_label, callables=callables)


def device_normalises(loader: DataLoader, options: PassOptions) -> bool:
    """Whether the pass's slots go to the GPU as uint8 and are normalised there: slotted
    batches, a device, and no GPU decode (which normalises on the device itself)."""
    return options.pool is not None and loader.transform is not None and loader.device is not None \
        and options.decoder is None


def host_delivery(loader: DataLoader, options: PassOptions, device_output: Any) -> Deliver:
    """The pass's ``deliver`` stage for host batches (:class:`Deliver`)."""
    transform = loader.transform
    # bfloat16 output: host slots hold float32 (NumPy has no bfloat16), cast on delivery
    spec = options.transform.output if options.pool is not None and options.transform is not None else None
    on_gpu = loader.device is not None and loader.device.type == "cuda" and options.decoder is None
    # bucketed batches of one shape from the per-sample decode (uint8): normalised once stacked
    bucketed = loader.buckets is not None and options.pool is None and not options.callables \
        and transform is not None
    return Deliver(CudaDelivery(loader.device) if on_gpu else None,
                   transform.output if bucketed and transform is not None else device_output,
                   None if spec is None or spec.torch_dtype == spec.dtype.name else getattr(torch, spec.torch_dtype),
                   loader.channels_last, stack=bool(options.callables) or loader.buckets is not None,
                   device=loader.device)


def batch_stages(loader: DataLoader, options: PassOptions, deliver: Deliver) -> list[BatchStage]:
    """The loader's batch stages after the decode: ``deliver`` (tensors, a GPU copy; with
    ``fields=``, dict batches), then torch's ``collate_fn`` and ``batch_transform``."""
    deliver_images: Callable[[Job, Any], Any] = deliver if options.decoder is None else _on_device
    if loader.fields is not None:
        deliver_images = _FieldsDeliver(deliver_images, loader.fields.names(), loader.dataset, loader.collate)
    then = [BatchStage(StageInfo("deliver", "batch", ("samples", "batches")), deliver_images)]
    if loader.torch_args.collate_pairs is not None:  # torch's collate_fn, over (image, label) pairs
        then.append(BatchStage(StageInfo("collate_fn", "batch"), _PairsCollate(loader.torch_args.collate_pairs)))
    if loader.batch_transform is not None:
        then.append(BatchStage(StageInfo("batch_transform", "batch"), _BatchTransform(loader.batch_transform)))
    return then


def _on_device(job: Job, value: tuple[Any, Any]) -> tuple[Any, Any]:
    """The deliver stage after GPU decode: the batch is on the device already."""
    return value


class Deliver:
    """The deliver stage for host batches: tensors over the slot (lent until the last
    tensor made from it is gone), or an async copy to the GPU, normalised there (the slot
    is released once the copy finished).

    Args:
        cuda: the copier to the GPU, or None for CPU tensors.
        output: normalisation done at delivery (on the GPU; or, for stacked per-sample
            outputs, on the batch), or None.
        host_cast: a torch dtype the host batch is cast to (bfloat16), or None.
        channels_last: slots hold NHWC rows.
        stack: per-sample outputs (user callables) that agree in shape and dtype are
            stacked into one batch tensor (on ``device`` when given); else a list.
    """

    def __init__(self, cuda: CudaDelivery | None, output: Any, host_cast: Any, channels_last: bool, *,
                 stack: bool = False, device: Any = None) -> None:
        self.cuda = cuda
        self.stack = stack
        self.device = device
        self.output = output
        self.host_cast = host_cast
        self.channels_last = channels_last
        self._held: tuple[Slot, Any] | None = None  # slot whose async copy may still run

    def __call__(self, job: Job, value: HostBatch | list) -> tuple[Any, Any]:
        if isinstance(value, list):  # per-sample outputs (of varying size, or of user callables)
            labels = torch.tensor([label for _, label in value], dtype=torch.int64)
            if not self.stack:
                return [torch.as_tensor(img) for img, _ in value], labels
            images = collate([img for img, _ in value])  # one tensor when the shapes agree
            if isinstance(images, torch.Tensor) and self.device is not None:
                images, labels = images.to(self.device), labels.to(self.device)
            if isinstance(images, torch.Tensor):
                images = apply_output(images, self.output)  # bucketed uint8 batches: Normalize/ToDtype
            return images, labels
        slot, n = value.slot, len(value.labels)
        assert slot is not None  # fixed-size batches are slots of the pool
        labels = torch.from_numpy(value.labels)
        if self.cuda is not None:
            images = self._nchw(torch.from_numpy(value.images))  # the slot itself: released after the copy
            images, labels, done = self.cuda.copy(images, labels, self.output)
            self._held = (slot, done)
            return images, labels
        images = self._nchw(torch.from_numpy(slot.lend(n)))
        return apply_output(images, self.output), labels

    def _nchw(self, images: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)  # NCHW shape over NHWC memory
        if self.host_cast is not None:
            images = images.to(self.host_cast)  # a copy: the slot is free again at once
        return images

    def release_held(self) -> None:
        """Before the next batch: the last batch's host slot is free once its copy finished."""
        if self._held is not None:
            slot, done = self._held
            done.synchronize()
            assert slot.pool is not None  # only slots of a pool are held
            slot.pool.release(slot)
            self._held = None


class _BatchTransform:
    """The user's ``batch_transform(images, labels)`` on each delivered batch (on its
    device); it returns ``(images, labels)``, or the images alone (labels unchanged).
    With ``fields`` (dict batches): ``batch_transform(batch) -> batch``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.name = name_of("batch_transform", fn)

    def __call__(self, job: Job, value: Any) -> Any:
        # a bug in it is not bad data: the pass stops (engine.usercode)
        out = call_on_batch(self.name, self.fn, *([value] if isinstance(value, dict) else value))
        if isinstance(value, dict) or (isinstance(out, tuple) and len(out) == 2):
            return out  # general samples: the whole dict batch in, one out
        return out, value[1]


class _PairsCollate:
    """torch's ``collate_fn`` on each delivered ``(images, labels)`` batch: it gets the
    list of ``(image, label)`` pairs a torch map-style dataset would give (each image a
    view of its row of the batch, each label an int) and returns the batch."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.name = name_of("collate_fn", fn)

    def __call__(self, job: Job, value: tuple[Any, Any]) -> Any:
        images, labels = value
        pairs = list(zip(images, labels.tolist()))
        return call_on_batch(self.name, self.fn, pairs)


class _FieldsDeliver:
    """The deliver stage of general samples: the image field as the host or GPU batch of
    the decode stage, the other fields collated, ``__key__`` and ``__url__``."""

    def __init__(self, images: Any, names: list[str], dataset: Any, collate: Any = None) -> None:
        self.images = images
        self.names = names
        self.dataset = dataset
        self.collate = collate

    def __call__(self, job: Job, value: tuple[Any, list[dict[str, Any]]]) -> dict[str, Any]:
        inner, fields = value
        image = None if inner is None else self.images(job, inner)[0]
        described = [self.dataset.describe(int(gid)) for gid in job.ids[job.ok]]
        if self.collate is not None:  # the user's: whole samples in, the batch out
            samples = [{**({} if image is None else {"image": image[i]}), **found, "__key__": key, "__url__": url}
                       for i, (found, (url, key)) in enumerate(zip(fields, described))]
            return call_on_batch(name_of("collate", self.collate), self.collate, samples)
        return field_batch(self.names, image, fields, described)
