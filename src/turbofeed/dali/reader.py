"""``turbofeed.dali.reader``: any turbofeed dataset as the outputs of a DALI pipeline."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..base.renamed import accepts_renamed
from ..decode.field_specs import parse_fields
from ..engine.choose import OpenedData
from ..engine.policy import ErrorPolicy
from ..engine.stats import Stats
from ..io import IndexedDataset, PathSpec, S3Config
from ._require import current_batch_size, dali_fn
from .batches import DatasetBatches, shard_of


@accepts_renamed
def reader(data: PathSpec | IndexedDataset, *, shuffle: bool = False, seed: int = 0, shard_id: int | None = None,
           num_shards: int | None = None, drop_last: bool = False, return_keys: bool = False,
           fields: Mapping[str, str] | None = None, label_dtype: Any = np.int64, on_error: str = "replace",
           format: str | None = None, format_options: dict | None = None, storage: S3Config | None = None,
           classes: list[str] | None = None, cache_dir: str | None = None,
           index: str | os.PathLike | bool | None = None, threads: int = 2,
           name: str | None = None) -> Any:
    """Read a turbofeed dataset inside a DALI pipeline definition.

    Call it inside ``@pipeline_def`` (or ``with pipe:``); the batch size is the pipeline's.
    Built on ``fn.external_source(batch_info=True)``: each batch is a pure function of
    DALI's (epoch, iteration), so DALI's checkpoints (``enable_checkpointing=True``,
    ``pipe.checkpoint()``, ``checkpoint=``) resume exactly, its prefetching included. The
    order is the DataLoader's (:mod:`turbofeed.plan`): shuffled per (seed, epoch), split
    over shards as over ranks (strided; wrap-around padding so every shard has the same
    batch count, or ``drop_last``). An epoch ends with ``StopIteration`` (DALI's
    iterators stop); after ``pipe.reset()`` the next epoch runs, reshuffled.

    Outputs (one ``DataNode`` each, CPU):

    ===================  =============================================================
    default              ``data, labels``: encoded bytes (uint8, 1-D; an array
                         format's arrays as stored) and labels of shape ``(1,)``
                         (``label_dtype``; -1 for an unlabelled sample)
    ``fields={...}``     one output per field, in the order given: the bytes of the
                         member the field picks (``{"image": "jpg;png", "meta":
                         "json?"}``; ``?``: optional, an empty array when missing)
    ``return_keys``      a last output: ``shard-000003.tar/00001234`` as UTF-8 bytes
    ===================  =============================================================

    Example::

        @pipeline_def(batch_size=64, num_threads=4, device_id=0)
        def train():
            jpegs, labels = turbofeed.dali.reader("data/shard-{000000..000146}.tar", shuffle=True)
            images = fn.decoders.image_random_crop(jpegs, device="mixed")
            return fn.resize(images, size=(224, 224)), labels.gpu()

    Args:
        data: anything the DataLoader reads: a path, list, brace pattern, glob, folder,
            ``s3://`` URL, HDF5/Zarr/.npy/Parquet/TFRecord (see ``docs/formats.md``), or
            a :class:`turbofeed.io.IndexedDataset` opened already (its own format and label
            options hold; it stays yours to close).
        shuffle, seed, drop_last, on_error, format, format_options, storage, classes,
            cache_dir, index: as :class:`turbofeed.DataLoader`'s.
        shard_id, num_shards: this pipeline's part of the data (DALI's names for rank and
            world size), both or neither; default: torch.distributed's rank and world size, or the
            launcher's variables, as the DataLoader finds them; one shard without any.
        return_keys: add the keys output.
        fields: general samples: one output per field instead of ``data, labels``.
        label_dtype: ``np.int64`` (default, as the DataLoader) or ``np.int32``.
        threads: threads reading the samples of a batch.
        name: the external source's name in the graph.

    Returns:
        A tuple of ``DataNode`` (see the table).

    Raises:
        turbofeed.MissingExtra: DALI is not installed (names the pip command).
        RuntimeError: called outside a pipeline definition.
        ValueError: bad options, or ``drop_last`` leaves this shard no batch.
    """
    fn, _ = dali_fn()
    batch_size = current_batch_size("turbofeed.dali.reader")
    specs = None if fields is None else parse_fields(fields)
    rank, world = shard_of(shard_id, num_shards)
    if isinstance(data, IndexedDataset):  # opened already: its own format, labels and index options hold
        stats = Stats()
        source = OpenedData(data, stats, ErrorPolicy(on_error, stats))
    else:
        source = OpenedData.open(data, on_error=on_error, cache_dir=cache_dir, format=format,
                                 format_options=format_options, storage=storage, classes=classes, labels=fields is None,
                                 index=index)
    batches = DatasetBatches(source, batch_size=batch_size, shuffle=shuffle, seed=seed, shard_id=rank,
                             num_shards=world, drop_last=drop_last, fields=specs, return_keys=return_keys,
                             label_dtype=label_dtype, threads=threads)
    return tuple(fn.external_source(source=batches, batch_info=True, num_outputs=batches.num_outputs, batch=True,
                                    name=name))
