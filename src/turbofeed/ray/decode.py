"""Decode on Ray: turbofeed's crop-decode-resize as a ``map_batches`` callable class.

Ray runs one instance per actor of an actor pool, on whichever nodes have the cores
(``ds.map_batches(Decode, fn_constructor_kwargs=..., concurrency=n)``), or the trainer
runs one itself on bytes shipped to it (:class:`~turbofeed.ray.loader.RayLoader` with a
``transform``). Each sample's crop is drawn from (seed, epoch, sample id) as the local
``DataLoader`` draws it (:meth:`~turbofeed.engine.work.SampleWork.bytes_into_slot`), so
a sample's pixels are the DataLoader's whichever node decoded them.

A batch crosses into Python once; its samples are decoded one by one in the actor's
own process (an actor has its own interpreter and GIL).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine.slots import Slot
from ..engine.work import SampleWork
from ..errors import SampleError
from ..transforms import Compose
from .source import describe, opened

#: the on_error values a Ray loader takes (a replacement would need a sample from
#: another read task)
ON_ERROR = ("raise", "skip")


class Decode:
    """Rows of :func:`turbofeed.ray.read` (``position``, ``gid``, ``key``, ``label``,
    ``data``, ``error``, ``stage``) to decoded rows: ``image`` (uint8, or the
    transform's output dtype; CHW unless ``channels_last``), ``label``, ``position``,
    ``key``, ``ok``, and for a bad sample (``ok`` False, its image zeros) ``error``,
    ``stage``, ``shard`` and ``sample_key``, from which the trainer's loader raises the
    :class:`~turbofeed.SampleError` or skips it, as its ``on_error`` says (an actor's
    exception would reach the trainer as Ray's, without the shard and key).

    Args:
        data: the data read (as :func:`turbofeed.ray.read` got it): labels and names.
        transform: a transform of one output size (``T.imagenet_train(224)``).
        seed, epoch: the crops' draws, as the DataLoader's.
        on_error: as the data was opened with (a damaged shard raises at indexing under
            ``"raise"``).
        channels_last: HWC images.

    Raises:
        ValueError: a transform of no fixed size, or an ``on_error`` Ray does not take.
    """

    def __init__(self, data: Any, *, transform: Compose, seed: int = 0, epoch: int = 0,
                 on_error: str = "raise", channels_last: bool = False) -> None:
        check_on_error(on_error)
        if not isinstance(transform, Compose) or transform.size is None:
            raise ValueError("turbofeed.ray's decode needs a transform of one output size, e.g. "
                             "T.imagenet_train(224)")
        self.channels_first = not channels_last
        source = opened(describe(data), on_error)
        self.work = SampleWork(source.dataset, transform, source.stats, seed=seed, epoch=epoch)
        height, width = transform.size
        self.shape = (3, height, width) if self.channels_first else (height, width, 3)
        self.dtype = np.uint8 if transform.output is None else transform.output.dtype

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(rows["gid"])
        slot = Slot(np.zeros((n, *self.shape), self.dtype), np.zeros(n, np.int64))
        ok = np.ones(n, bool)
        errors, stages = list(rows["error"]), list(rows["stage"])
        shards, keys = [""] * n, [""] * n
        for j, (gid, data) in enumerate(zip(rows["gid"].tolist(), rows["data"])):
            try:
                if errors[j]:  # the read task found it bad
                    shard, key = self.work.dataset.describe(gid)
                    raise SampleError(shard, key, stages[j], errors[j])
                self.work.bytes_into_slot(gid, data, slot, j, channels_first=self.channels_first)
            except SampleError as exc:
                ok[j] = False
                errors[j], stages[j], shards[j], keys[j] = exc.reason, exc.stage, exc.shard, exc.key
                slot.images[j] = 0
                slot.labels[j] = rows["label"][j]
        return {"image": slot.images, "label": slot.labels, "position": rows["position"], "key": rows["key"],
                "ok": ok, "error": np.array(errors, object), "stage": np.array(stages, object),
                "shard": np.array(shards, object), "sample_key": np.array(keys, object)}


def check_on_error(on_error: str) -> None:
    """Raises ValueError: ``on_error`` is not one Ray reading takes (:data:`ON_ERROR`)."""
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error on Ray must be one of {ON_ERROR}, got {on_error!r} (a replacement "
                         "would come from another read task)")
