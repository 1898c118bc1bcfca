"""``torch.utils.data.DataLoader``'s own constructor arguments, given to :class:`turbofeed.DataLoader`.

Code written for torch passes its arguments by their torch names. Each one turbofeed has a
meaning for is taken with it; each one it has none for is refused with a one-line reason
naming what to use instead, never a bare ``TypeError``:

=========================  ==========================================================
torch argument             in turbofeed
=========================  ==========================================================
``dataset``                ``data`` (an alias, not deprecated: a
                           :class:`turbofeed.Dataset`, a ``mix``, paths); a torch
                           ``Dataset`` object is refused: turbofeed reads the files
                           itself
``batch_size``             as torch; ``None`` (unbatched samples) is refused
``shuffle``, ``drop_last`` as torch (``None`` is ``False``)
``num_workers``            threads; ``0`` decodes in the consumer's thread, as torch
``collate_fn``             ``fn(list of (image, label))`` per batch, as torch (with
                           ``fields=``: ``collate``, a list of sample dicts); with
                           ``return_keys``: ``(collate_fn(...), keys)``, or a dict
                           batch with ``"__key__"``
``pin_memory``             as torch (default: when delivering to CUDA)
``timeout``                seconds one batch may take; longer raises ``TimeoutError``
``generator``              seeds the order: ``seed=generator.initial_seed()``
``prefetch_factor``        ``prefetch``: batches decoded ahead
``persistent_workers``     accepted: there are no worker processes to keep
``in_order``               accepted: batches always come in order (resume is exact)
``pin_memory_device``      ``""`` or a CUDA device: pinned memory serves every GPU
``sampler``,               refused: turbofeed plans the order (``shuffle``, ``seed``,
``batch_sampler``          ranks, ``weights``/``resample``)
``worker_init_fn``         refused: no worker processes (threads share this process)
``multiprocessing_context``  refused: no worker processes
=========================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

#: Locals of the constructor that a copy is not rebuilt from: :func:`constructor_arguments`
#: leaves them out (torch's ``dataset=`` and the old data keywords are folded into ``data``).
_NOT_ARGUMENTS = ("self", "__class__", "dataset", "data_keywords")


@dataclass(frozen=True)
class TorchArgs:
    """What the torch arguments came to (see the module table).

    Attributes:
        data: the data, as given (:func:`torch_data`).
        shuffle: ``shuffle`` as a bool (torch's default ``None`` is ``False``).
        seed: the order's seed (``generator``'s initial seed when given).
        prefetch: batches decoded ahead (``prefetch_factor`` when given).
        collate: with ``fields``: the user's ``collate`` (or ``collate_fn``); before
            :meth:`with_fields`, ``collate`` as given.
        collate_pairs: without ``fields``: ``collate_fn`` over ``(image, label)`` pairs;
            before :meth:`with_fields`, ``collate_fn`` as given.
        timeout: seconds a batch may take (0: no limit).
        generator: the ``torch.Generator`` given, as torch's ``loader.generator``.
    """

    data: Any
    shuffle: bool
    seed: int
    prefetch: int
    collate: Callable[[list], Any] | None
    collate_pairs: Callable[[list], Any] | None
    timeout: float
    generator: Any

    def with_fields(self, fields: Any) -> TorchArgs:
        """Settled for the samples the loader makes: dicts of ``fields`` (given to the
        loader or by its :class:`turbofeed.Dataset`), where torch's ``collate_fn`` is
        ``collate``; else ``(image, label)`` pairs, where ``collate`` has no use.

        Raises:
            ValueError: ``collate=`` without fields.
        """
        collate, pairs = self.collate, self.collate_pairs
        if fields is not None:
            return replace(self, collate=collate if collate is not None else pairs, collate_pairs=None)
        if collate is not None:
            raise ValueError("turbofeed.DataLoader: collate= takes the sample dicts of fields=; for (image, label) "
                             "samples pass collate_fn=, as to torch")
        return self


def _refuse(name: str, why: str) -> ValueError:
    return ValueError(f"turbofeed.DataLoader: {name}= is not supported: {why}")


def torch_arguments(*, data: Any, batch_size: Any, shuffle: bool | None, sampler: Any, batch_sampler: Any,
                    collate_fn: Any, collate: Any, timeout: float, worker_init_fn: Any,
                    multiprocessing_context: Any, generator: Any, seed: int, prefetch_factor: int | None,
                    prefetch: int, persistent_workers: bool, pin_memory_device: str,
                    in_order: bool, **others: Any) -> TorchArgs:
    """Check torch's arguments and say what they come to (see the module table). Takes
    every constructor argument by name (:func:`constructor_arguments`); ``others`` are
    turbofeed's own, not looked at here.

    Raises:
        ValueError: an argument turbofeed has no meaning for (one line: why, and what
            to use instead), or a value torch would refuse too.
        TypeError: a ``batch_size`` or ``generator`` of the wrong type.
    """
    if batch_size is None:
        raise ValueError("turbofeed.DataLoader: batch_size=None (torch's unbatched samples) is not supported: "
                         "turbofeed always batches; use batch_size=1 and take element 0 of each batch")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"turbofeed.DataLoader: batch_size must be an int, got {batch_size!r}")
    if sampler is not None:
        raise _refuse("sampler", "turbofeed plans the order itself: use shuffle= and seed= (or generator=), "
                                 "enable_distributed= for ranks, weights=/resample= for mixing and sampling "
                                 "with replacement")
    if batch_sampler is not None:
        raise _refuse("batch_sampler", "turbofeed makes the batches itself: use batch_size=, drop_last=, "
                                       "shuffle= and seed= (loader.batch_sampler describes them for torch code)")
    if worker_init_fn is not None:
        raise _refuse("worker_init_fn", "there are no worker processes (threads share this process): set up "
                                        "state once before iterating; seeds of the order and of the random "
                                        "augmentations come from seed=")
    if multiprocessing_context is not None:
        raise _refuse("multiprocessing_context", "there are no worker processes: turbofeed decodes in threads "
                                                 "(num_workers=N) that release the GIL")
    if pin_memory_device and not str(pin_memory_device).startswith("cuda"):
        raise _refuse("pin_memory_device", f"{pin_memory_device!r}: pinned memory is page-locked for CUDA "
                                           "(any GPU); use pin_memory=True, and device= for where batches go")
    if timeout is None or timeout < 0:
        raise ValueError(f"turbofeed.DataLoader: timeout must be >= 0 seconds (0: no limit), got {timeout!r}")
    if prefetch_factor is not None:
        if isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int) or prefetch_factor < 1:
            raise ValueError(f"turbofeed.DataLoader: prefetch_factor must be an int >= 1, got {prefetch_factor!r}")
        if prefetch not in (2, prefetch_factor):  # 2: prefetch's default, not given
            raise ValueError(f"turbofeed.DataLoader: prefetch={prefetch} and prefetch_factor={prefetch_factor} "
                             "are one setting (batches decoded ahead): give one of them")
        prefetch = prefetch_factor
    if generator is not None:
        if not hasattr(generator, "initial_seed"):
            raise TypeError("turbofeed.DataLoader: generator must be a torch.Generator, "
                            f"got {type(generator).__name__}")
        if seed not in (0, generator.initial_seed()):  # 0: seed's default, not given
            raise ValueError(f"turbofeed.DataLoader: seed={seed} and generator= (initial seed "
                             f"{generator.initial_seed()}) both seed the order: give one of them")
        seed = generator.initial_seed()
    del persistent_workers, in_order  # accepted: nothing to keep; batches always in order
    if collate_fn is not None and collate is not None:
        raise ValueError("turbofeed.DataLoader: collate_fn= and collate= are one setting (the batch from its "
                         "samples): give one of them")
    return TorchArgs(data=data, shuffle=bool(shuffle), seed=seed, prefetch=prefetch, collate=collate,
                     collate_pairs=collate_fn, timeout=float(timeout), generator=generator)


def torch_data(data: Any, dataset: Any) -> Any:
    """The data, given as ``data`` or under torch's name ``dataset=``.

    Raises:
        TypeError: both, neither, or a torch ``Dataset`` object.
    """
    if data is not None and dataset is not None:
        raise TypeError("turbofeed.DataLoader: data and dataset= name the same thing: give one of them")
    data = dataset if data is None else data
    if data is None:
        raise TypeError("turbofeed.DataLoader: no data: pass paths (a list, a brace pattern "
                        "'shard-{000000..000099}.tar', a folder, s3://...) as the first argument")
    try:
        from torch.utils.data import Dataset, IterableDataset
    except ImportError:  # pragma: no cover - torch is a dependency of this package
        return data
    if isinstance(data, (Dataset, IterableDataset)):
        raise TypeError(f"turbofeed.DataLoader: a torch Dataset object ({type(data).__name__}) cannot be loaded: "
                        "turbofeed reads the files itself; pass the paths the dataset reads (tar shards, an "
                        "ImageFolder root, HDF5/Parquet/... files) as data, or use torch.utils.data.DataLoader")
    return data


def constructor_arguments(frame_locals: dict[str, Any]) -> dict[str, Any]:
    """The constructor's arguments from ``locals()`` taken first thing in ``__init__``:
    what a copy (pickle, ``copy.deepcopy``) rebuilds the loader from."""
    return {k: v for k, v in frame_locals.items() if k not in _NOT_ARGUMENTS}


def rebuild(cls: type, arguments: dict[str, Any]) -> Any:
    """A loader of class ``cls`` built afresh from its constructor ``arguments``: how a
    loader unpickles (its configuration, not its threads or its position)."""
    return cls(**arguments)
