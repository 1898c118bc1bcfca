"""``turbofeed.ray.read``: the Ray dataset of one epoch, and the state a restart reads from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..transforms import Compose
from .decode import Decode
from .positions import Consumed
from .source import TurbofeedDatasource, ray_data

#: the version of :class:`~turbofeed.ray.loader.RayLoader`'s state; a state of another
#: version is refused
STATE_VERSION = 1


def read(data: Any, *, seed: int = 0, epoch: int = 0, shuffle: bool = True, transform: Compose | None = None,
         decoders: int | None = None, on_error: str = "raise", channels_last: bool = False,
         resume: Sequence[dict] | dict | None = None, rows_per_task: int = 256,
         actor_options: dict[str, Any] | None = None) -> Any:
    """One epoch of ``data`` as a ``ray.data.Dataset``, for a ``TorchTrainer`` (docs/ray.md).

    Without ``transform`` its rows are the encoded samples (``position``, ``gid``,
    ``key``, ``label``, ``data``, ``error``, ``stage``), to be decoded by the trainer
    (:func:`turbofeed.ray.loader` with a ``transform``: on its GPU with
    ``gpu_decode=True``); with it, a pool of ``decoders`` actors (default: Ray's choice)
    decodes them on whichever nodes have the cores, the rows then being those of
    :class:`~turbofeed.ray.decode.Decode`.

    Args:
        data: a path (list, glob, brace pattern, ``s3://`` prefix) or a :class:`turbofeed.Dataset`.
        seed, epoch, shuffle: the epoch's order and crops, as the DataLoader's.
        transform: decode on actors with this transform.
        decoders: the actor pool's size.
        on_error: ``"raise"`` or ``"skip"`` (bad samples are counted in the loader's ``stats``).
        channels_last: HWC images from the actors.
        resume: the trainers' ``state_dict()`` (one, or one per trainer) of this epoch: the
            positions they consumed are not read again.
        rows_per_task: positions per read task.
        actor_options: Ray's options for each decode actor (``num_cpus``, ``resources``,
            ``scheduling_strategy``, ...): where the decoding runs.

    Raises:
        ValueError: a state of another epoch or version, or an option Ray reading does not take.
    """
    consumed = merged(resume, epoch) if resume is not None else None
    source = TurbofeedDatasource(data, seed=seed, epoch=epoch, shuffle=shuffle, consumed=consumed,
                                 rows_per_task=rows_per_task, on_error=on_error)
    rows = ray_data.read_datasource(source)
    if transform is None:
        return rows
    kwargs: dict[str, Any] = dict(transform=transform, seed=seed, epoch=epoch, on_error=on_error,
                                  channels_last=channels_last)
    Decode(data, **kwargs)  # a bad option fails here, not in an actor
    return rows.map_batches(Decode, fn_constructor_args=(data,), fn_constructor_kwargs=kwargs, batch_size=64,
                            concurrency=decoders or (1, 8), **(actor_options or {}))


def merged(states: Sequence[dict] | dict | None, epoch: int) -> Consumed:
    """The positions consumed by every trainer whose state is in ``states`` (each a
    :meth:`RayLoader.state_dict`), for ``epoch``.

    Raises:
        ValueError: a state of another epoch or version.
    """
    if states is None:
        return Consumed()
    out = Consumed()
    for state in [states] if isinstance(states, dict) else states:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"turbofeed.ray: a state of version {state.get('version')!r}, this version reads "
                             f"{STATE_VERSION}")
        if state["epoch"] != epoch:
            raise ValueError(f"turbofeed.ray: a state of epoch {state['epoch']} cannot resume epoch {epoch}")
        out = out.union(Consumed(state["consumed"]))
    return out
