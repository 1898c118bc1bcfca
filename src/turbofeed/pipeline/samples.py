"""``turbofeed.Pipeline``: the sample-level API (``start / next_batch(n) / stop``)."""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..base.ranks import RankChoice
from ..base.stageinfo import StageInfo
from ..base.threads import choose_threads
from ..datasets import MIX_OPTIONS, OLD_LOADER_KEYWORDS, OPTIONS, Dataset, Mix, data_args, described
from ..decode import decode
from ..decode.field_specs import FieldOptions
from ..decode.orientation import orientation, upright
from ..engine.build import PassOptions, build_pass
from ..engine.choose import OpenedData, open_gpu_decoder
from ..engine.run import BatchStage, Engine
from ..engine.stream import Job
from ..engine.usercode import check_user_errors
from ..engine.work import Decoded
from ..io import IndexedDataset, PathSpec
from ..plan import make_epoch_plan
from ..transforms import Compose, hwc_pixels

_CHUNK = 32  # samples per unit of work inside the pipeline; next_batch(n) regroups them
#: The Dataset options a Pipeline reads (not ``streaming``), and its old data keywords (one release)
_DATA_KEYWORDS = tuple(name for name in OPTIONS if name != "streaming")
_OLD_KEYWORDS = tuple(name for name in OLD_LOADER_KEYWORDS if name not in (*MIX_OPTIONS, "streaming"))


@dataclass
class Sample:
    """One sample: ``key``, ``label`` (-1 if none), ``shard``, and its image.

    With ``fields`` (general samples), ``sample.fields`` holds the other fields by name
    and ``sample["caption"]`` reads one (``sample["image"]`` is :meth:`get_image`,
    ``"__key__"``/``"__url__"`` the key and shard).

    ``data`` holds the encoded bytes (the uint8 pixels for the array formats: HDF5,
    Zarr, .npy) when the pipeline does not decode (``decode_jpeg=False``);
    ``get_image()`` then decodes on demand (upright when ``orient``: the pipeline's
    ``apply_exif_orientation``). ``tensor`` holds
    the (H, W, 3) torch tensor on the decoder's device when the pipeline decoded on the
    GPU (``gpu_decode``); with a transform it is a view of its chunk's batched output.
    """

    key: str
    label: int
    shard: str
    data: bytes | np.ndarray | None = field(default=None, repr=False)
    image: np.ndarray | None = field(default=None, repr=False)
    tensor: Any = field(default=None, repr=False)
    fields: dict[str, Any] = field(default_factory=dict, repr=False)
    orient: bool = field(default=False, repr=False)

    def __getitem__(self, name: str) -> Any:
        """A field by name: ``"image"`` (:meth:`get_image`), ``"__key__"``, ``"__url__"``,
        or one of ``fields``.

        Raises:
            KeyError: naming the fields the sample has.
        """
        if name == "image":
            return self.get_image()
        if name == "__key__":
            return self.key
        if name == "__url__":
            return self.shard
        if name not in self.fields:
            raise KeyError(f"sample {self.shard}/{self.key} has no field {name!r}; it has "
                           f"{['image', *self.fields, '__key__', '__url__']}")
        return self.fields[name]

    def get_image(self) -> np.ndarray:
        """The image as HWC uint8 RGB (float if the pipeline's transform normalises).

        A GPU-decoded sample copies its ``tensor`` to the host once (device to host)."""
        if self.image is None:
            if self.tensor is not None:
                self.image = np.ascontiguousarray(self.tensor.cpu().numpy())
            elif self.data is None:
                raise ValueError(f"sample {self.shard}/{self.key} has no image data")
            else:
                image = decode(self.data)
                tag = orientation(self.data) if self.orient else 1
                self.image = image if tag == 1 else np.ascontiguousarray(upright(image, tag))
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


def _sample_maker(dataset: IndexedDataset) -> Callable[[int], Sample]:
    def make_sample(gid: int) -> Sample:
        shard, key = dataset.describe(gid)
        return Sample(key, int(dataset.labels[gid]), shard)
    return make_sample


class Pipeline:
    """Read, decode and optionally transform samples with worker threads, in a fixed order.

    Args:
        tar_paths: a :class:`turbofeed.Dataset` (what the data is and how it is read:
            ``format``, ``storage``, ``classes``, ``fields``, ``index``...), a
            :func:`turbofeed.mix` of them without weights (read one after the other), or
            paths, as :class:`turbofeed.DataLoader` takes them (``Dataset(paths)``). The
            data keywords given here instead (``format=``, ``fields=``...) are still
            accepted for one release, with a ``DeprecationWarning`` naming the
            ``turbofeed.Dataset(...)`` to pass.
        num_workers: worker threads; None (default): the cores this process may use divided
            by the ranks on this node (as :class:`turbofeed.DataLoader`).
        decode_jpeg: decode images (else samples carry the encoded bytes).
        shuffle, seed: the order, a pure function of (seed, epoch).
        transform: optional :class:`turbofeed.transforms.Compose` applied per sample (images
            are float when it ends with ``Normalize``/``ToDtype``).
        on_error: ``"replace"``, ``"skip"`` or ``"raise"`` for bad samples (bad data
            only: storage faults raise :class:`turbofeed.StorageError` in every mode).
        rank, world_size: this process's share of the data (strided split), both or
            neither (one alone is a ``ValueError``); used as given, with one WARNING when a
            process group or launcher says otherwise.
        enable_distributed: without ``rank``/``world_size``: ``None`` (default) splits where
            ``torch.distributed`` is initialised or a launcher says there are several ranks
            (one WARNING naming them), ``True`` likewise, ``False`` reads every sample on
            every rank; read again at each ``start()`` (see :class:`turbofeed.DataLoader`).
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
        paired, map: general samples (a Dataset with ``fields``; as for
            :class:`turbofeed.DataLoader`): each sample's other fields in ``sample.fields``
            and ``sample["name"]``.
        user_errors: ``"raise"`` (default): an exception from ``map`` (or a result that is not
            a dict) stops the epoch with :class:`turbofeed.UserCodeError` naming ``map``,
            the shard and the key; ``"bad_sample"`` makes it a bad sample (``on_error``).
        apply_exif_orientation: turn images upright by their EXIF Orientation tag (1-8)
            before any crop, on every decode path, as ``ImageOps.exif_transpose`` does
            (torchvision's name; default False, as torchvision and Pillow). See
            :class:`turbofeed.DataLoader`.

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

    def __init__(self, tar_paths: Dataset | Mix | PathSpec, num_workers: int | None = None,
                 decode_jpeg: bool = True, *,
                 shuffle: bool = False, seed: int = 0, transform: Compose | list | None = None,
                 on_error: str = "replace", rank: int | None = None, world_size: int | None = None,
                 enable_distributed: bool | None = None,
                 gpu_decode: bool | Any = False, device_id: int = 0, prefetch: int | None = None,
                 paired: Sequence[str] = (), map: Callable[[dict], dict] | None = None, user_errors: str = "raise",
                 apply_exif_orientation: bool = False, **data_keywords: Any) -> None:
        # the old data keywords (one release) folded into the Dataset they describe, with one warning
        tar_paths = described(tar_paths, data_keywords, "Pipeline", _OLD_KEYWORDS)
        given = data_args(tar_paths, "Pipeline", **dict.fromkeys(_DATA_KEYWORDS))
        tar_paths, format, format_options, storage, cache_dir, classes, fields, decoders, index = given[:9]
        self.user_errors = check_user_errors(user_errors)
        self.apply_exif_orientation = apply_exif_orientation
        self.fields = FieldOptions.make(fields, decoders=decoders, paired=paired, map=map, classes=classes,
                                        has_transform=transform is not None)
        self._source = OpenedData.open(tar_paths, on_error=on_error, cache_dir=cache_dir, format=format,
                                       format_options=format_options, storage=storage, classes=classes,
                                       labels=fields is None, index=index)
        self.dataset, self.stats, self._policy = self._source.dataset, self._source.stats, self._source.policy
        self.transform = Compose(transform) if isinstance(transform, (list, tuple)) else transform
        if self.transform is not None and self.transform.callables:
            raise ValueError(f"Pipeline transforms are turbofeed's own ops only; "
                             f"{self.transform.callables[0]!r} is a callable: apply it to "
                             "sample.get_image(), or use turbofeed.DataLoader, which runs callables "
                             "in its worker threads")
        self.num_workers = choose_threads().threads if num_workers is None else num_workers
        self.decode_jpeg = decode_jpeg
        self.shuffle = shuffle
        self.seed = seed
        self._ranks = RankChoice(enable_distributed, rank, world_size)  # read again when a pass is planned
        env = self._ranks.resolve()
        self.rank, self.world_size = env.rank, env.world_size
        self.gpu_decode, self.device_id = gpu_decode, device_id
        self.decoder = open_gpu_decoder(gpu_decode, f"cuda:{device_id}", self.stats, stacklevel=3) \
            if decode_jpeg else None
        self.prefetch = prefetch or max(2, self.num_workers)
        self.epoch = 0
        self._engine: Engine | None = None
        self._ready: deque[Sample] = deque()

    def _sync_ranks(self) -> None:
        """This rank's share as the environment says now (not while a pass runs)."""
        if self._engine is None:
            env = self._ranks.resolve()
            self.rank, self.world_size = env.rank, env.world_size

    def __len__(self) -> int:
        """Samples per epoch for this rank."""
        self._sync_ranks()
        return len(make_epoch_plan(self.dataset.num_samples, batch_size=1, seed=self.seed, epoch=0,
                                   shuffle=False, rank=self.rank, world_size=self.world_size).order)

    def set_epoch(self, epoch: int) -> None:
        """Restart at the beginning of ``epoch`` (its own shuffle)."""
        self.stop()
        self.epoch = int(epoch)

    def start(self) -> None:
        """Start the worker threads for the current epoch (no-op if running). Shards
        changed on disk since they were indexed are re-indexed first."""
        if self._engine is not None:
            return
        self._source.refresh()
        self._sync_ranks()
        plan = make_epoch_plan(self.dataset.num_samples, batch_size=_CHUNK, seed=self.seed,
                               epoch=self.epoch, shuffle=self.shuffle, rank=self.rank,
                               world_size=self.world_size)
        policy = self._policy.for_pass()
        # The stages run on the worker threads: they must not hold ``self``, or the
        # threads would keep a dropped Pipeline (and themselves) alive.
        make_sample = _sample_maker(self.dataset)
        output = self.transform.output if self.transform is not None else None

        def with_pixels(gid: int, loaded: Decoded) -> Sample:
            sample = make_sample(gid)
            sample.image = hwc_pixels(loaded.pixels, flip=loaded.flip, output=output)
            return sample

        orient = self.apply_exif_orientation

        def with_bytes(gid: int, data: bytes | np.ndarray) -> Sample:
            sample = make_sample(gid)
            sample.data, sample.orient = data, orient
            return sample

        options = PassOptions(self.dataset, self.stats, _CHUNK, self.num_workers, prefetch=self.prefetch,
                              seed=self.seed, transform=self.transform, fields=self.fields, orient=orient,
                              user_errors=self.user_errors, decoder=self.decoder, shape=with_pixels,
                              fetch_only=None if self.decode_jpeg else with_bytes)
        then = []
        if self.decoder is not None or self.fields is not None:
            gpu, has_fields = self.decoder is not None, self.fields is not None

            def samples(job: Job, value: Any) -> list[Sample]:
                inner, fields = value if has_fields else (value, None)
                if inner is None:  # no image field: samples with fields only
                    out = [make_sample(int(gid)) for gid in job.ids[job.ok]]
                elif gpu:  # the GPU stage gives (entry, tensor on the device) pairs
                    out = []
                    for entry, tensor in inner:
                        sample = make_sample(entry.gid)
                        sample.tensor = tensor
                        out.append(sample)
                else:
                    out = inner
                for sample, found in zip(out, fields or ()):
                    sample.fields = found
                return out
            then.append(BatchStage(StageInfo("samples", "batch", ("samples", "batches")), samples))
        self._engine = build_pass(options, plan, policy, epoch=self.epoch, then=then)
        # Dropped without stop() (or collected): the threads stop with it.
        self._finalizer = weakref.finalize(self, self._engine.close)

    def next_batch(self, n: int) -> list[Sample]:
        """Up to ``n`` next samples in order; fewer at the end; ``[]`` once the epoch is done.

        Raises:
            SampleError: a bad sample under ``on_error="raise"``.
            UserCodeError: ``map`` raised (the threads are stopped; the epoch ends there,
                as after a ``SampleError``).
            StorageError: a storage fault (an outage longer than the retry policy, a
                shard changed or gone during the pass), whatever ``on_error`` says.
        """
        if self._engine is None:
            self.start()
        engine = self._engine
        assert engine is not None  # start() made it
        while len(self._ready) < n:
            done = next(engine, None)
            if done is None:
                break
            self._ready.extend(done[1])
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
        if self._engine is not None:
            self._finalizer()  # closes the engine, once
            self._engine = None
        self._ready.clear()

    def __enter__(self) -> "Pipeline":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
