"""The trainer's side on Ray: batches of torch tensors from a Ray dataset, and the state
that resumes the epoch exactly."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..engine.stats import Stats
from ..errors import SampleError, TurbofeedError
from ..transforms import Compose
from .decode import Decode, check_on_error
from .positions import Consumed
from .read import STATE_VERSION, merged


class RayLoader:
    """Batches ``(images, labels)`` (``(images, labels, keys)`` with ``return_keys``) of
    the rows of :func:`turbofeed.ray.read`, for one trainer (``train.get_dataset_shard``'s
    iterator, or the dataset itself).

    Each batch's positions count as consumed when it is handed out, so
    :meth:`state_dict`, saved in a checkpoint after a step, names exactly the samples this
    trainer was given; on restart ``turbofeed.ray.read(..., resume=[...every trainer's
    state])`` reads the rest of the epoch, and each trainer's :meth:`load_state_dict`
    keeps counting from there.

    Args:
        rows: a ``ray.data.Dataset`` or ``DataIterator`` of :func:`~turbofeed.ray.read` rows.
        batch_size: samples per batch (fewer where bad samples were skipped).
        data, transform, seed, epoch, channels_last: with ``transform``, the rows are
            encoded and this trainer decodes them (:class:`~turbofeed.ray.decode.Decode`);
            without it, they were decoded by actors. ``epoch`` is the state's.
        on_error: a bad sample raises its :class:`~turbofeed.SampleError` (``"raise"``)
            or is skipped and counted in ``stats`` (``"skip"``).
        device: the device the tensors go to (None: the CPU).
        return_keys: add each sample's ``shard/key``.
        drop_last: drop a last partial batch.
    """

    def __init__(self, rows: Any, *, batch_size: int, data: Any = None, transform: Compose | None = None,
                 seed: int = 0, epoch: int = 0, on_error: str = "raise", channels_last: bool = False,
                 device: torch.device | str | None = None, return_keys: bool = False,
                 drop_last: bool = False) -> None:
        check_on_error(on_error)
        if transform is not None and data is None:
            raise ValueError("turbofeed.ray.loader: decoding here (transform=...) needs data= too: its labels "
                             "and names")
        self.rows = rows
        self.batch_size = batch_size
        self.epoch = epoch
        self.decode = None if transform is None else Decode(data, transform=transform, seed=seed, epoch=epoch,
                                                            on_error=on_error, channels_last=channels_last)
        self.device = None if device is None else torch.device(device)
        self.on_error = on_error
        self.return_keys = return_keys
        self.drop_last = drop_last
        self.consumed = Consumed()
        self.stats = Stats()

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        batches = iter(self.rows.iter_batches(batch_size=self.batch_size, batch_format="numpy",
                                              drop_last=self.drop_last))
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except Exception as exc:  # a read task's or an actor's error, wrapped by Ray
                ours = turbofeed_error(exc)
                if ours is None:
                    raise
                raise ours from exc
            if self.decode is not None:
                batch = self.decode(batch)
            yield self._deliver(batch)

    def _deliver(self, batch: dict[str, np.ndarray]) -> tuple[Any, ...]:
        ok = np.asarray(batch["ok"], bool)
        if self.on_error == "raise" and not ok.all():  # the batch's first bad sample, by position
            bad = np.flatnonzero(~ok)
            j = int(bad[np.argmin(np.asarray(batch["position"])[bad])])
            raise SampleError(str(batch["shard"][j]), str(batch["sample_key"][j]), str(batch["stage"][j]),
                              str(batch["error"][j]))
        self.consumed.add(batch["position"])
        for stage in np.asarray(batch["stage"], object)[~ok].tolist():
            self.stats.count("skipped")
            self.stats.count_error(stage)
        images = torch.from_numpy(np.ascontiguousarray(batch["image"][ok]))
        labels = torch.from_numpy(np.asarray(batch["label"], np.int64)[ok])
        if self.device is not None:
            images, labels = images.to(self.device), labels.to(self.device)
        self.stats.count("batches")
        self.stats.count("samples", int(ok.sum()))
        if self.return_keys:
            return images, labels, [str(k) for k in np.asarray(batch["key"], object)[ok].tolist()]
        return images, labels

    def state_dict(self) -> dict:
        """The epoch and the positions this trainer was given (JSON-safe)."""
        return {"version": STATE_VERSION, "epoch": self.epoch, "consumed": [list(r) for r in self.consumed.runs()]}

    def load_state_dict(self, state: dict) -> None:
        """Keep counting from ``state`` (the merged states the restart read with, or this
        trainer's own): a later :meth:`state_dict` names what was consumed before too.

        Raises:
            ValueError: a state of another epoch or version.
        """
        self.consumed = merged(state, self.epoch)


def turbofeed_error(exc: BaseException) -> TurbofeedError | None:
    """A copy of the :class:`~turbofeed.errors.TurbofeedError` (a ``SampleError``, a
    ``StorageError``) in ``exc``'s chain, which Ray wraps in its own (``UserCodeException``
    for an actor's); None when there is none. A copy: raised in the trainer from Ray's
    error, it names the shard and key as the local loader's would."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, TurbofeedError):
            return copy.copy(exc)
        # Ray's errors from another process hold the remote one as ``cause``
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def loader(rows: Any, *, batch_size: int, **options: Any) -> RayLoader:
    """:class:`RayLoader` over ``rows`` (inside ``train_loop_per_worker``:
    ``ray.train.get_dataset_shard("train")``)."""
    return RayLoader(rows, batch_size=batch_size, **options)
