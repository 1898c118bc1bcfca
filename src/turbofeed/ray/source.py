"""A Ray Data ``Datasource`` over turbofeed data: an epoch's order cut into read tasks.

Each read task holds a contiguous range of positions of the epoch's order (a pure
function of seed, epoch and shuffle: :func:`turbofeed.plan.order.epoch_permutation`)
and yields their encoded bytes with their position, sample id, key and label. The
task opens the data itself, once per worker process (:func:`opened`), through the
dataset index as every loader does. Positions already consumed (a checkpoint's
:class:`~turbofeed.ray.positions.Consumed`) get no task.
"""

from __future__ import annotations

import functools
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..datasets import Dataset as DataDescription
from ..engine.choose import OpenedData
from ..engine.work import SampleWork
from ..errors import SampleError, StorageError
from ..extras import require
from ..plan.order import epoch_permutation
from .positions import Consumed, read_ranges

ray_data = require("ray.data", "ray", "turbofeed data on Ray")

#: rows of one block a read task yields (a read task's range is read block by block)
ROWS_PER_BLOCK = 64

_OPENED: dict[bytes, OpenedData] = {}
_OPENED_LOCK = threading.Lock()


def describe(data: Any) -> DataDescription:
    """``data`` as a :class:`turbofeed.Dataset` (a path is wrapped), checked for what Ray
    reading takes in this version: images with labels (no ``fields``), not streamed."""
    description = data if isinstance(data, DataDescription) else DataDescription(data)
    if description.fields is not None:
        raise ValueError("turbofeed.ray reads images with labels; Dataset(fields=...) is not supported on Ray yet")
    if description.streaming:
        raise ValueError("turbofeed.ray reads through the node cache; Dataset(streaming=True) is not supported "
                         "on Ray yet")
    return description


def opened(description: DataDescription, on_error: str = "raise", *, again: bool = False) -> OpenedData:
    """The data opened in this process (once per description and ``on_error``: a Ray
    worker runs many tasks and actors of one dataset); ``again``: opened anew, this
    process's copy dropped."""
    key = pickle.dumps((description, on_error))
    with _OPENED_LOCK:
        source = None if again else _OPENED.get(key)
        if source is None:
            options = description.options()
            source = _OPENED[key] = OpenedData.open(
                description.data, on_error=on_error, cache_dir=options["cache_dir"], format=options["format"],
                format_options=options["format_options"], storage=options["storage"], classes=options["classes"],
                index=options["index"])
        return source


def same_data(description: DataDescription, on_error: str, digest: str) -> OpenedData:
    """The data opened in this process, as it was when the epoch was cut (content print
    ``digest``), opened again once where this process's copy is older.

    Raises:
        StorageError: the data changed since :func:`turbofeed.ray.read` cut the epoch:
            positions would name other samples.
    """
    source = opened(description, on_error)
    if source.dataset.content_print().digest != digest:
        source = opened(description, on_error, again=True)
        if source.dataset.content_print().digest != digest:
            raise StorageError(str(description.data), "the data changed since turbofeed.ray.read() cut the epoch "
                               "(its content differs): read it again")
    return source


def read_rows(description: DataDescription, on_error: str, digest: str, positions: np.ndarray,
              gids: np.ndarray) -> Iterator[Any]:
    """A read task's work: the rows of ``positions`` (sample ids ``gids``) in blocks of
    :data:`ROWS_PER_BLOCK`: ``position``, ``gid``, ``key`` (``shard/key``), ``label``,
    ``data`` (the encoded bytes; empty where ``error`` says why there are none, and
    ``stage`` which stage found it).

    Raises:
        StorageError: a shard vanished, changed or failed to read, or the data is not
            what it was when the epoch was cut (``digest``: :func:`same_data`).
    """
    import pyarrow as pa

    source = same_data(description, on_error, digest)
    dataset = source.dataset
    work = SampleWork(dataset, None, source.stats, seed=0, epoch=0)  # the fetch only: no crop drawn here
    for first in range(0, len(positions), ROWS_PER_BLOCK):
        rows = slice(first, first + ROWS_PER_BLOCK)
        keys, datas, errors, stages = [], [], [], []
        for gid in gids[rows].tolist():
            keys.append(dataset.sample_name(gid))
            try:
                data = work.fetch(gid)
                if isinstance(data, np.ndarray):
                    raise SampleError(*dataset.describe(gid), "fetch", "pre-decoded arrays are not read on Ray yet")
                datas.append(bytes(data))
                errors.append("")
                stages.append("")
            except SampleError as exc:  # bad data: the decode applies on_error
                datas.append(b"")
                errors.append(exc.reason)
                stages.append(exc.stage)
        yield pa.table({"position": pa.array(positions[rows], pa.int64()), "gid": pa.array(gids[rows], pa.int64()),
                        "key": pa.array(keys, pa.string()),
                        "label": pa.array(dataset.labels[gids[rows]], pa.int64()),
                        "data": pa.array(datas, pa.binary()), "error": pa.array(errors, pa.string()),
                        "stage": pa.array(stages, pa.string())})


class TurbofeedDatasource(ray_data.Datasource):  # type: ignore[name-defined]
    """The positions of one epoch not yet consumed, as read tasks of at most
    ``rows_per_task`` contiguous positions each (the module docstring).

    Args:
        data: a path (or list, glob, ...) or a :class:`turbofeed.Dataset`.
        seed, epoch, shuffle: the epoch's order, as the DataLoader's.
        consumed: positions already delivered (a restart's), or None.
        rows_per_task: positions per read task.
        on_error: as the DataLoader's; here it decides whether a damaged shard raises
            when the data is opened (the decode applies it to bad samples).
    """

    def __init__(self, data: Any, *, seed: int, epoch: int, shuffle: bool, consumed: Consumed | None,
                 rows_per_task: int, on_error: str = "raise") -> None:
        super().__init__()
        self.description = describe(data)
        self.on_error = on_error
        dataset = opened(self.description, on_error).dataset
        self.digest = dataset.content_print().digest  # each read task checks it reads the same data
        self.size = len(dataset)
        self.order = epoch_permutation(self.size, seed=seed, epoch=epoch, shuffle=shuffle)
        self.ranges = read_ranges(self.size, consumed or Consumed(), rows_per_task)
        sizes = dataset.ranges().sizes  # the order is a permutation: every sample's bytes once
        self.nbytes = int(sizes.sum()) if len(sizes) else None

    def estimate_inmemory_data_size(self) -> int | None:
        return self.nbytes

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[Any]:
        """One task per range, whatever ``parallelism``: the ranges are what a checkpoint
        is made of, so they do not depend on the cluster."""
        from ray.data.block import BlockMetadata

        tasks = []
        for start, stop in self.ranges:
            positions = np.arange(start, stop, dtype=np.int64)
            read = functools.partial(read_rows, self.description, self.on_error, self.digest, positions,
                                     self.order[start:stop])
            tasks.append(ray_data.ReadTask(read, BlockMetadata(num_rows=stop - start, size_bytes=None,
                                                               exec_stats=None, input_files=None),
                                           per_task_row_limit=per_task_row_limit))
        return tasks

    def get_name(self) -> str:
        return "turbofeed"
