"""What the front-ends share: opening the data with its stats and policy, opening a GPU
decoder (or saying why not), and choosing the decode stage of a pass.

``DataLoader`` and ``Pipeline`` only pick their options and shape the output; the one
place that maps options to a decode stage is :func:`decode_stage`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..decode.field_specs import FieldOptions
from ..io import IndexedDataset, PathSpec, S3Config
from ..plan import EpochPlan
from ..transforms import Compose
from .bucket_slots import BucketPool
from .chunks import ChunkedCpuDecode, chunk_size, chunked
from .fields import FieldReader, NoImage, WithFields
from .policy import ErrorPolicy, PassPolicy
from .slots import SlotPool
from .stages import DecodeStage, FusedCpuDecode, fetch_only as fetch_stage, per_sample_cpu, read_only
from .stats import Stats
from .work import Decoded, SampleWork


@dataclass
class OpenedData:
    """The data of a front-end with what it counts: dataset, stats, bad-sample policy."""

    dataset: IndexedDataset
    stats: Stats
    policy: ErrorPolicy

    @classmethod
    def open(cls, data: PathSpec, *, on_error: str, cache_dir: str | None, format: str | None,
             format_options: dict | None, storage: S3Config | None, classes: list[str] | None,
             labels: bool = True, index: str | os.PathLike | bool | None = None) -> OpenedData:
        """Index ``data`` (a damaged shard raises under ``on_error="raise"``); without
        ``labels`` (general samples) no label is parsed; ``index``: the dataset index, as
        :class:`~turbofeed.io.IndexedDataset` takes it."""
        stats = Stats()
        policy = ErrorPolicy(on_error, stats)  # validates on_error before any indexing
        dataset = IndexedDataset(data, on_damage="raise" if on_error == "raise" else "skip", cache_dir=cache_dir,
                                 format=format, format_options=format_options, storage=storage, classes=classes,
                                 labels=labels, index=index)
        source = cls(dataset, stats, policy)
        source.sync_stats()
        return source

    def sync_stats(self) -> None:
        self.stats.skipped_at_index = len(self.dataset.problems)
        self.stats.damaged_shards = list(self.dataset.damaged)

    def refresh(self) -> bool:
        """Re-index shards changed on disk (before a pass: no worker running); True if any."""
        if not self.dataset.refresh():
            return False
        self.sync_stats()
        return True


def open_gpu_decoder(gpu_decode: bool | Any, device: Any, stats: Stats, *, unusable: str | None = None,
                     stacklevel: int = 4) -> Any:
    """The batch decoder for ``gpu_decode``, or None (CPU decoding) with one warning saying
    why and one count in ``stats.errors["gpu_fallback"]``. ``unusable``: a reason the
    caller's options rule the GPU out."""
    if gpu_decode is False or gpu_decode is None:
        return None
    decoder, reason = None, unusable
    if reason is None:
        from ..decode.gpu import open_decoder

        decoder, reason = open_decoder(gpu_decode, device)
    if decoder is None:
        warnings.warn(f"turbofeed: gpu_decode=True but {reason}; decoding on the CPU",
                      RuntimeWarning, stacklevel=stacklevel)
        stats.count_error("gpu_fallback")
    return decoder


def decode_stage(work: SampleWork, plan: EpochPlan, policy: PassPolicy, *, batch_size: int,
                 decoder: Any = None, hybrid: Any = None,
                 pool: Callable[[np.dtype, bool], SlotPool | BucketPool] | None = None,
                 channels_last: bool = False, shape: Callable[[int, Decoded], Any] | None = None,
                 fetch_only: Callable[[int, Any], Any] | None = None,
                 callables: Sequence[Callable[[Any], Any]] = (), fields: FieldOptions | None = None,
                 user_errors: str = "raise", num_workers: int = 0,
                 read: Callable[[int], Any] | None = None) -> DecodeStage:
    """The decode stage of a pass, from the front-end's options:

    - ``read``: no fetch of the image, no decode: ``read(id)`` per sample (its own reads);
    - ``fetch_only``: no decode; ``fetch_only(id, bytes)`` per sample;
    - ``callables`` (the user's, after the fused ops; ``work`` has the fused part): the
      fused decode, then the callables, per sample (``(tensor, label)``);
    - ``decoder`` (and ``hybrid``, a :class:`~turbofeed.engine.hybrid.HybridSplit`): the
      GPU, or split between GPU and CPU threads; batches stacked when ``pool`` is given,
      else per sample;
    - ``pool`` (``pool(dtype, channels_last) -> SlotPool``; the transform has one output
      size): the fused CPU decode into batch slots, per chunk of positions where it can
      (:func:`turbofeed.engine.chunks.chunked`; chunks sized for ``num_workers``
      threads), else per sample;
    - otherwise: per-sample CPU decode, ``shape(id, decoded)`` per sample;

    and with ``fields`` (general samples; ``work`` reads the image field's member), the
    stage above for the ``image`` field (none without one) plus the other fields, decoded
    by type in the same thread (:class:`~turbofeed.engine.fields.WithFields`).

    ``user_errors``: what an exception from a transform callable or ``map`` becomes
    (:mod:`turbofeed.engine.usercode`).
    """
    transform: Compose | None = work.transform
    if read is not None:
        return read_only(batch_size, read)
    if fields is not None:
        reader = FieldReader(work, fields, user_errors=user_errors)
        if fields.image() is None:
            return WithFields(NoImage(batch_size), reader, batch_size)
        inner = decode_stage(work, plan, policy, batch_size=batch_size, decoder=decoder, hybrid=hybrid, pool=pool,
                             channels_last=channels_last, shape=shape, fetch_only=fetch_only, callables=callables,
                             user_errors=user_errors, num_workers=num_workers)
        return WithFields(inner, reader, batch_size)
    if fetch_only is not None:
        return fetch_stage(work, batch_size, fetch_only)
    if callables:
        from .augment import augment_stage  # imports torch

        first = 0 if transform is None else len(transform.ops)  # ``work`` has the fused ops alone
        return augment_stage(work, batch_size, callables, first=first, user_errors=user_errors)
    if decoder is not None:
        from .decode_gpu import GpuDecode
        from .gpu_chunks import ChunkedGpuDecode

        if hybrid is None and pool is not None and transform is not None and chunked(work):
            return ChunkedGpuDecode(decoder, work, transform, plan, policy, batch_size=batch_size,
                                    chunk=chunk_size(batch_size, num_workers), channels_last=channels_last)
        gpu = GpuDecode(decoder, work, transform, plan, policy, batch_size=batch_size, stacked=pool is not None,
                        channels_last=channels_last)
        if hybrid is None:
            return gpu
        assert pool is not None and transform is not None  # hybrid needs host slots and a fixed size
        from .hybrid import HybridDecode

        cpu_work = SampleWork(work.dataset, transform.without_output(), work.stats, seed=work.seed, epoch=work.epoch,
                              image_exts=work.image_exts, orient=work.orient)
        cpu = FusedCpuDecode(cpu_work, pool(np.dtype(np.uint8), False), channels_first=True)
        return HybridDecode(gpu, cpu, hybrid)
    if pool is not None and transform is not None:
        spec = transform.output
        dtype = np.dtype(np.uint8) if spec is None else spec.dtype
        slots = pool(dtype, channels_last)
        if isinstance(slots, SlotPool) and chunked(work, output=True):
            return ChunkedCpuDecode(work, slots, channels_first=not channels_last, plan=plan, policy=policy,
                                    chunk=chunk_size(batch_size, num_workers))
        return FusedCpuDecode(work, slots, channels_first=not channels_last)
    assert shape is not None  # a per-sample decode says what each sample becomes
    return per_sample_cpu(work, batch_size, shape)
