"""``turbofeed.DataLoader``: tar shards or image folders to (images, labels) tensors."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..base.ranks import RankChoice
from ..base.threads import choose_threads
from ..datasets import OLD_LOADER_KEYWORDS, OPTIONS, Dataset, Mix, data_args, described
from ..decode.field_specs import FieldOptions
from ..engine.choose import OpenedData, open_gpu_decoder
from ..engine.layout import epoch_draw, shard_bytes, stream_layout
from ..engine.slots import SlotPools
from ..engine.usercode import check_user_errors
from ..io import PathSpec
from ..plan import EpochDraw, StreamLayout
from ..transforms import Compose
from ._compat import TorchDropIn
from ._epochs import EpochBook
from ._iterator import _LoaderIterator
from ._planning import LoaderPlanner
from ._torchargs import constructor_arguments, torch_arguments, torch_data
from .buckets import loader_buckets
from .device import gpu_available

log = logging.getLogger("turbofeed")


class DataLoader(TorchDropIn):
    """Iterate (images, labels) batches of a WebDataset tar or ImageFolder dataset.

    Two kinds of arguments. *What the data is* (paths, ``format``, ``storage``,
    ``classes``, ``fields``, ``index``, ``streaming``...): described once as a
    :class:`turbofeed.Dataset`, or a :func:`turbofeed.mix` of them (``weights``,
    ``epoch_size``, ``resample``), and passed as ``data``. *How batches are made*: the
    arguments below (batch size, order, transforms, threads, device, errors, ranks).
    The data keywords this loader took before (``format=``, ``fields=``, ``weights=``,
    ``s3=``...) are still accepted for one release: they make the ``Dataset``/``mix``
    they describe, with one ``DeprecationWarning`` naming it; with a description that
    holds one, they are a ``TypeError``.

    Args:
        data: a :class:`turbofeed.Dataset`, a :func:`turbofeed.mix` of them, or paths
            (``Dataset(paths)``: a path, a list, a brace pattern
            ``shard-{000000..000146}.tar``, a glob, a folder of ``.tar`` shards, an
            ImageFolder root, ``s3://``...). Also taken as ``dataset=``, torch's name.
        batch_size: samples per batch.
        num_workers: worker threads (decode and resize release the GIL). None (default):
            the cores this process may use (CPU affinity, cgroup quota) divided by the
            ranks on this node, at least 1 (:func:`turbofeed.base.threads.choose_threads`;
            ``turbofeed doctor`` shows the choice). 0: no threads, each batch is read and
            decoded in the consumer's thread when asked for, as torch's ``num_workers=0``.
        shuffle: shuffle each epoch; the order is a pure function of (seed, epoch).
        seed: the seed of the order and of the random augmentations.
        drop_last: drop the last partial batch (and, distributed, the uneven tail).
        transform: a :class:`turbofeed.transforms.Compose` (or a list of ops, or one
            callable). With a fixed output size, images come as one ``(N, 3, H, W)``
            tensor, uint8 unless the transform ends with ``Normalize``/``ToDtype``;
            without one, as a list of ``(3, H, W)`` uint8 tensors. Callables of your own
            after turbofeed's ops (torchvision v2 transforms, functions of a (3, H, W)
            tensor) run per sample in the worker threads on the fused decode's output;
            a batch whose outputs agree in shape and dtype is stacked, else a list. A
            callable that raises, or returns None or what is not a tensor or an array,
            stops the pass with :class:`turbofeed.UserCodeError` (see ``user_errors``).
        enable_distributed: ``None`` (default): split the data across ranks where
            ``torch.distributed`` is initialised or a launcher's variables (torchrun,
            SLURM, Horovod, MPI) say the world size is above 1, with one WARNING naming
            rank, world size and where they came from; read again when each pass is
            planned, so a loader built before ``init_process_group`` (Lightning,
            Accelerate) splits too. ``True``: split likewise. ``False``: every rank reads
            the whole dataset (one WARNING under a launcher of several ranks).
        rank, world_size: explicit distributed position, both or neither (one alone is a
            ``ValueError``); used as given, with one WARNING when a process group or
            launcher says otherwise (``rank=0, world_size=1`` reads everything).
        device: None or ``"cpu"`` for CPU tensors; ``"cuda"``/``"cuda:N"`` to deliver on
            the GPU (uint8 copied asynchronously, normalised there).
        pin_memory: page-locked host batches; default: when delivering to CUDA.
        channels_last: images in NHWC memory order (shape still NCHW).
        prefetch: batches decoded ahead of the one being consumed.
        on_error: ``"replace"`` (default), ``"skip"`` or ``"raise"``: see
            :class:`turbofeed.pipeline.ErrorPolicy`. With ``"raise"`` a damaged tar
            also raises at construction. Bad *data* only: user code errors, storage
            faults (an outage longer than the retry policy, a shard changed or gone
            during the pass: :class:`turbofeed.StorageError`) and a resume state from
            other data always raise.
        user_errors: ``"raise"`` (default): an exception from your own code (a
            ``transform`` callable, ``map``, ``collate``, ``batch_transform``), or a
            None or unbatchable value it returns, stops the pass at once with
            :class:`turbofeed.UserCodeError` naming the callable, shard and key, raised
            from your exception. ``"bad_sample"``: a transform callable's or ``map``'s
            failure on a sample is a bad sample instead (``on_error`` replaces, skips or
            raises it); ``collate`` and ``batch_transform`` still raise.
        gpu_decode: ``True`` decodes each batch with nvJPEG in one call on ``device``
            (default ``cuda``) and crops/resizes/normalises it there in one batched op;
            threads only read bytes and pick crop windows. Without a GPU or a decoder
            backend it falls back to the CPU path with one warning; images the GPU
            rejects are decoded on the CPU. Both are counted in
            ``stats.errors["gpu_fallback"]``. Also accepts a decoder object with
            ``device`` and ``decode(list[bytes]) -> list[tensor | None]``.
        hybrid: with ``gpu_decode``, split every batch between the GPU decoder and the
            CPU threads in proportion to the speed each has shown (timed per batch,
            smoothed); ``hybrid_share`` is the GPU's current fraction. The CPU part goes
            through pinned uint8 host slots, normalised on the device like the GPU part.
        return_keys: yield ``(images, labels, keys)``, keys being the sample keys
            (``shard-000003.tar/00001234``) actually delivered, replacements included.
            With ``collate_fn`` (or ``collate``): ``(batch, keys)``, ``batch`` being what
            it returned, whatever its type; a dict batch instead gets ``"__key__"`` (when
            it has none: batches of ``fields`` hold the sample keys already).
        batch_transform: ``fn(images, labels)`` run once per delivered batch, on its
            device (Mixup/CutMix, GPU augmentations); returns ``(images, labels)`` or the
            images alone; with a Dataset's ``fields``, ``fn(batch) -> batch``. An
            exception or a None result raises :class:`turbofeed.UserCodeError`.
        paired, map, collate: with a Dataset's ``fields``: fields given the image's
            crop window and flip (masks: ``paired=["mask"]``); ``map(fields) -> fields``
            per sample; ``collate(samples)`` instead of the default dict batch. See
            docs/samples.md.
        apply_exif_orientation: turn each image upright by its EXIF Orientation tag
            (1-8, as ``PIL.ImageOps.exif_transpose`` does) before the crop window is
            chosen, on every decode path (torchvision's name; default False, as
            torchvision and Pillow: pixels as stored). The native crop decoder maps the
            window onto the stored pixels and turns only its output (within 1 level of
            Pillow's resize of the turned image); the GPU path turns each decoded image.
        buckets: aspect-ratio buckets: ``"aspect"`` (SDXL's nine sizes near 1024x1024), a
            list of ``(height, width)`` or of ratios (width / height). Every batch then
            holds images of one bucket (by their stored size, from the dataset index),
            shuffled per (seed, epoch), the same bucket on every rank at each step, and
            equal steps on every rank (a bucket's last partial batch dropped or padded
            from the same bucket, as ``drop_last`` says); resumable with the same world
            and batch size. Give the transform ``transforms.BucketResize`` with the same
            value to size each batch to its bucket's shape. See docs/samples.md.

    torch's own arguments (``collate_fn``, ``timeout``, ``generator``...) are taken with
    their meaning or refused saying what to use instead (:mod:`turbofeed.torch._torchargs`).
    Drop-in for code written for ``torch.utils.data.DataLoader``: ``dataset`` (all ranks,
    ``len(loader.dataset)`` samples), ``sampler``, ``batch_sampler``, ``collate_fn``,
    ``num_workers`` (0 processes; threads: ``num_threads``)...: :class:`~turbofeed.torch._compat.TorchDropIn`.

    Example::

        train = turbofeed.Dataset("data/shard-{000000..000009}.tar", classes=names)
        loader = turbofeed.DataLoader(train, batch_size=256, shuffle=True,
                                      transform=turbofeed.transforms.imagenet_train(224))
        for epoch in range(3):
            loader.set_epoch(epoch)
            for images, labels in loader:   # uint8 (256, 3, 224, 224), int64 (256,)
                ...
    """

    def __init__(self, data: Dataset | Mix | PathSpec | None = None, batch_size: int = 64,
                 num_workers: int | None = None, shuffle: bool = False, *, seed: int = 0, drop_last: bool = False,
                 transform: Compose | list | None = None,
                 enable_distributed: bool | None = None, rank: int | None = None, world_size: int | None = None,
                 device: str | torch.device | None = None, pin_memory: bool | None = None,
                 channels_last: bool = False, prefetch: int = 2, on_error: str = "replace",
                 gpu_decode: bool | Any = False, return_keys: bool = False, hybrid: bool = False,
                 batch_transform: Callable[..., Any] | None = None, paired: Sequence[str] = (),
                 map: Callable[[dict], dict] | None = None, collate: Callable[[list[dict]], Any] | None = None,
                 user_errors: str = "raise", apply_exif_orientation: bool = False,
                 buckets: str | Sequence | None = None,
                 # torch.utils.data.DataLoader's own arguments: torch/_torchargs.py says what each comes to
                 sampler: Any = None, batch_sampler: Any = None,
                 collate_fn: Callable[[list], Any] | None = None, timeout: float = 0, worker_init_fn: Any = None,
                 multiprocessing_context: Any = None, generator: torch.Generator | None = None,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True, **data_keywords: Any) -> None:
        dataset = data_keywords.pop("dataset", None)  # torch's name of data: an alias, not deprecated
        # the old data keywords (one release) folded into the Dataset or mix() they describe, with one warning
        data = described(torch_data(data, dataset), data_keywords, "DataLoader", OLD_LOADER_KEYWORDS)
        self._arguments = constructor_arguments(locals())  # what a copy is rebuilt from (pickle, deepcopy)
        torch_args = torch_arguments(**self._arguments)  # checked, and what they come to
        data, seed, prefetch, shuffle = torch_args.data, torch_args.seed, torch_args.prefetch, torch_args.shuffle
        self.apply_exif_orientation = apply_exif_orientation
        auto_threads = num_workers is None  # chosen again if the ranks on this node change
        if num_workers is None:
            num_workers = choose_threads().threads
        if batch_size < 1 or num_workers < 0:
            raise ValueError(f"batch_size must be >= 1 and num_workers >= 0, got {batch_size}, {num_workers}")
        # what the data is and how it is read, from its description (a path: Dataset(path))
        (data, format, format_options, storage, cache_dir, classes, fields, decoders, index, streaming, weights,
         epoch_size, resample) = data_args(data, "DataLoader", **dict.fromkeys(OPTIONS), weights=None,
                                           epoch_size=None, resample=False)
        self.torch_args = torch_args = torch_args.with_fields(fields)  # fields: also from a Dataset
        collate = torch_args.collate
        self.user_errors = check_user_errors(user_errors)
        self.fields = FieldOptions.make(fields, decoders=decoders, paired=paired, map=map, classes=classes,
                                        has_transform=transform is not None)
        self.collate = collate  # general samples: the user's, instead of the dict batch
        self._source = OpenedData.open(data, on_error=on_error, cache_dir=cache_dir, format=format,
                                       format_options=format_options, storage=storage, classes=classes,
                                       labels=fields is None, index=index)
        self.dataset, self.stats, self._policy = self._source.dataset, self._source.stats, self._source.policy
        if transform is not None and not isinstance(transform, Compose):
            transform = Compose(transform)  # a list of ops, or one callable of your own
        self.transform = transform
        self.batch_transform = batch_transform
        self.batch_size = batch_size
        self.num_threads = num_workers
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.prefetch = prefetch
        self.channels_last = channels_last
        self.return_keys = return_keys
        ranks = RankChoice(enable_distributed, rank, world_size)  # read again before each pass
        env = ranks.resolve()
        self.rank, self.world_size = env.rank, env.world_size
        # the epochs and resume (book), the plans (planner): objects of their own
        self.book = EpochBook(self)
        self.planner = planner = LoaderPlanner(self, ranks=ranks, auto_threads=auto_threads, streaming=streaming,
                                               ahead=(prefetch + 2) * batch_size)  # how far the fetch stage reads
        self.stream_layout: StreamLayout | None = stream_layout(
            self.dataset, streaming, nodes=env.nodes, ranks_per_node=env.local_world_size, ahead=planner.ahead)
        # drawn again from the dataset when its shards change (_reindex_changed)
        self._draw_for = functools.partial(epoch_draw, data=data, weights=weights, epoch_size=epoch_size,
                                           resample=resample, format=format, storage=storage)
        self.draw: EpochDraw | None = self._draw_for(self.dataset)
        self._bucket_for = functools.partial(loader_buckets, buckets, transform=transform,
                                             streaming=self.stream_layout is not None, draw=self.draw,
                                             orient=apply_exif_orientation)
        self.buckets = self._bucket_for(self.dataset)  # drawn again when the shards change
        self.device = None if device is None or str(device) == "cpu" else torch.device(device)
        if self.device is not None and self.device.type == "cuda" and not gpu_available():
            raise RuntimeError(f"device={device!r} but PyTorch sees no CUDA GPU; use device=None")
        self._gpu_decoder = self._gpu_decoder_for(gpu_decode)  # may move self.device to its GPU
        self._pinned = (self.device is not None) if pin_memory is None else pin_memory
        if self._pinned and not gpu_available():
            self._pinned = False  # page-locking needs the CUDA runtime
        # Lives across epochs: the speeds measured in one epoch set the next one's split.
        self._hybrid = None
        if hybrid and self._gpu_decoder is not None:
            from ..engine.hybrid import HybridSplit

            self._hybrid = HybridSplit(num_workers)
        planner.fingerprint = planner.make_fingerprint()
        if planner.epoch_batches() == 0:
            raise ValueError(f"batch_size={batch_size} with drop_last=True leaves no batch: this rank "
                             f"has {planner.per_rank()} samples")
        size = self.transform.size if self.transform is not None else None
        # batch slots, kept across passes (fixed-size batches only)
        self._slot_pool = None if size is None else SlotPools(batch_size, size, pinned=self._pinned,
                                                               capacity=prefetch + 2)

    def _gpu_decoder_for(self, gpu_decode: bool | Any) -> Any:
        """The batch decoder for ``gpu_decode``, or None (CPU path) with one warning saying why."""
        fixed = self.transform is not None and self.transform.size is not None
        decoder = open_gpu_decoder(gpu_decode, self.device or "cuda", self.stats,
                                   unusable=None if fixed else "it needs a transform with a fixed output size")
        if decoder is None:
            return None
        if torch.device(decoder.device).type == "cuda":
            self.device = torch.device(decoder.device)  # batches are born on the decoder's GPU
        return decoder

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

    # -- iteration ---------------------------------------------------------------------
    def __iter__(self) -> _LoaderIterator:
        """A new pass, as ``torch.utils.data.DataLoader``: it starts its epoch from the
        beginning, whatever an earlier pass left undone (only the first pass after
        :meth:`load_state_dict` continues at the saved position). The epoch is the one of
        :meth:`set_epoch`, else the one after that of the last pass that yielded a batch
        (a bare ``iter()``, as Lightning's check, takes no epoch). E.g. with 12 batches::

            next(iter(loader))           # epoch 0, batch 0 (a peek)
            list(loader)                 # epoch 1, all 12 batches
            for step, batch in zip(range(len(loader)), loader): ...   # epoch 2, 12 steps

        Iterators are independent, as torch's (a train loader reused for validation
        mid-epoch; ``state_dict()`` follows: :mod:`turbofeed.torch._epochs`). Close or drop
        an iterator you abandon: its threads wait for it until it is garbage-collected.
        """
        return self.book.new_pass(functools.partial(_LoaderIterator, self))

    def _reindex_changed(self) -> None:
        """Before a pass (no worker running): re-index the shards changed on disk since
        they were indexed, so no read goes through stale offsets or a map of a file
        truncated since (SIGBUS). One ``stat`` per local file."""
        if not self._source.refresh():
            return
        if self.stream_layout is not None:  # the shards' sizes changed: so do the blocks
            self.stream_layout = dataclasses.replace(self.stream_layout, starts=self.dataset.starts,
                                                     shard_bytes=shard_bytes(self.dataset))
        if self.draw is not None:
            self.draw = self._draw_for(self.dataset)
        if self.buckets is not None:
            self.buckets = self._bucket_for(self.dataset)
        self.planner.fingerprint = self.planner.make_fingerprint()
        if self.book.resume:
            log.warning("turbofeed: the data changed on disk after load_state_dict; the resumed "
                        "epoch continues at sample %d of the re-indexed data", self.book.start)
        if self.planner.epoch_batches() == 0:
            raise ValueError(f"after re-indexing, batch_size={self.batch_size} with drop_last=True "
                             f"leaves no batch: this rank has {self.planner.per_rank()} samples")

    # -- epochs and resume: the book's ---------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` in every following pass (:meth:`EpochBook.set_epoch
        <turbofeed.torch._epochs.EpochBook.set_epoch>`: sticky, as
        ``DistributedSampler.set_epoch``; right after :meth:`load_state_dict`, the state's
        epoch keeps the resume position)."""
        self.book.set_epoch(epoch)

    @property
    def samples_done(self) -> int:
        """Prefix of this epoch's global order consumed by all ranks together."""
        return self.book.samples_done

    def state_dict(self) -> dict:
        """Where things stand: a small JSON-safe dict (:meth:`EpochBook.state_dict
        <turbofeed.torch._epochs.EpochBook.state_dict>`; :meth:`load_state_dict` takes it)."""
        return self.book.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Continue where ``state`` was taken: the next ``iter(loader)`` yields the rest of
        that epoch, exactly with the world size that saved it, elastically with another
        (:meth:`EpochBook.load_state_dict <turbofeed.torch._epochs.EpochBook.load_state_dict>`).

        Raises:
            ValueError: the state was saved on other data, or with another seed or plan.
        """
        self.book.load_state_dict(state)

    def __len__(self) -> int:
        """Batches the next ``iter(loader)`` yields on this rank (the same on every rank):
        a whole epoch's, or after :meth:`load_state_dict` (until that pass starts), the
        rest of the resumed epoch, as tqdm and Lightning count the steps."""
        book = self.book
        return self.planner.epoch_batches(book.start if book.resume else 0)

    def profile(self) -> str:
        """Seconds per stage so far, biggest first: where the time goes."""
        return self.stats.profile()

    def close(self) -> None:
        """Stop the running passes and close the dataset's files."""
        for it in self.book.live_passes():
            it.close()
        self.dataset.close()

    def __repr__(self) -> str:
        return (f"DataLoader(samples={self.num_samples}, batches={len(self)}, batch_size={self.batch_size}, "
                f"rank={self.rank}/{self.world_size}, threads={self.num_threads}, transform={self.transform!r})")
