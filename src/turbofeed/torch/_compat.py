"""Drop-in: the attributes code written for ``torch.utils.data.DataLoader`` reads.

Accelerate, Lightning and training loops read ``sampler``, ``batch_sampler``,
``num_workers``, ``collate_fn``, ``pin_memory``... turbofeed orders, reads, decodes and
collates in its own threads, so these describe it in torch's terms, and a torch
DataLoader rebuilt from them delivers turbofeed's own batches. Accelerate's
``skip_first_batches(loader, n)`` builds::

    torch.utils.data.DataLoader(loader.dataset, batch_sampler=SkipBatchSampler(loader.batch_sampler, n),
                                collate_fn=loader.collate_fn, num_workers=loader.num_workers, ...)

- ``loader.batch_sampler`` yields one :class:`BatchRef` per batch; the first ``n`` are
  dropped unseen;
- torch fetches a ref by iterating it: it holds no sample index, so nothing is read
  from the dataset, and it marks itself as the batch being fetched;
- ``loader.collate_fn([])`` returns that batch from a pass of the loader resumed at the
  ref's position (the exact resume of ``load_state_dict``): the skipped batches are never
  read or decoded, the pixels are those of an uninterrupted epoch, and
  ``loader.state_dict()`` follows the pass;
- ``num_workers`` is 0, torch's count of worker *processes* (turbofeed runs none), so the
  rebuilt loader fetches in this process, in order, from the pipeline's threads.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ._torchargs import TorchArgs, rebuild

if TYPE_CHECKING:
    import torch

    from ._iterator import _LoaderIterator
    from .loader import DataLoader

_fetching = threading.local()  # the BatchRef torch is fetching on this thread


class EpochSampler:
    """``loader.sampler``: this rank's sample order for the epoch the next ``iter(loader)``
    runs (as ``DistributedSampler``).

    ``len()`` is the rank's samples per epoch (wrap-around padded, or cut with
    ``drop_last``); iterating yields their global ids (``loader.dataset.describe(i)``
    names one); ``set_epoch(e)`` is ``loader.set_epoch(e)``, which Lightning calls at every
    epoch. Holds the loader weakly (the loader keeps it).
    """

    def __init__(self, loader: DataLoader) -> None:
        self._loader = weakref.ref(loader)

    def _get(self) -> DataLoader:
        loader = self._loader()
        if loader is None:
            raise ReferenceError("turbofeed: the DataLoader of this sampler was garbage-collected")
        return loader

    def __len__(self) -> int:
        return self._get().planner.per_rank()

    def __iter__(self) -> Iterator[int]:
        loader = self._get()
        order = loader.planner.plan(loader.book.upcoming_epoch()).order
        # an array as ints; a resampled epoch's lazy order yields ints itself, block by block
        return iter(order.tolist()) if isinstance(order, np.ndarray) else iter(order)

    def set_epoch(self, epoch: int) -> None:
        self._get().set_epoch(epoch)


class BatchRef:
    """Batch ``index`` of the epoch, as ``loader.batch_sampler`` yields it. Iterates as no
    sample index and marks itself as the batch being fetched; ``loader.collate_fn([])``
    then returns that batch."""

    __slots__ = ("owner", "index")

    def __init__(self, owner: EpochBatchSampler, index: int) -> None:
        self.owner = owner
        self.index = index

    def __iter__(self) -> Iterator[int]:
        _fetching.ref = self
        return iter(())

    def __repr__(self) -> str:
        return f"BatchRef({self.index})"


class EpochBatchSampler:
    """``loader.batch_sampler``: one :class:`BatchRef` per batch of the epoch the next
    ``iter(loader)`` runs, for torch code that rebuilds the loader (see the module doc).

    ``len()`` is the epoch's batch count (``len(loader)`` but for a resume waiting for
    its ``iter()``: the refs are the epoch's batch indexes); ``batch_size``, ``drop_last`` and ``sampler`` are the
    loader's; ``set_epoch`` is ``loader.set_epoch``. Each ``loader.batch_sampler`` is a new
    one; it holds the loader and, while torch fetches from it, one pass of the loader.
    """

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.batch_size = loader.batch_size
        self.drop_last = loader.drop_last
        self._pass: _LoaderIterator | None = None
        self._next = 0  # the batch index self._pass yields next

    @property
    def sampler(self) -> EpochSampler:
        return self.loader.sampler

    def __len__(self) -> int:
        return self.loader.planner.epoch_batches()

    def __iter__(self) -> Iterator[BatchRef]:
        return (BatchRef(self, i) for i in range(self.loader.planner.epoch_batches()))

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def take(self, index: int) -> Any:
        """Batch ``index`` of the epoch: the next one of the running pass, or the first of
        a pass resumed there (after skipped batches, or when the previous pass is gone)."""
        it = self._pass
        if it is None or it.done or self._next != index:
            self.loader.book.resume_at(index)
            it = self._pass = iter(self.loader)
            self._next = index
        batch = next(it)
        self._next += 1
        if it.done:
            self._pass = None
        return batch


def collate_fetched(samples: list) -> Any:
    """``loader.collate_fn``: turbofeed collates its own batches; given the empty list
    torch builds for a :class:`BatchRef`, returns that ref's batch."""
    ref: BatchRef | None = getattr(_fetching, "ref", None)
    _fetching.ref = None
    if ref is None or len(samples):
        raise TypeError("turbofeed collates its own batches: loader.collate_fn only hands over the batch of "
                        "the loader.batch_sampler entry torch is fetching, as in torch.utils.data.DataLoader("
                        "loader.dataset, batch_sampler=loader.batch_sampler, collate_fn=loader.collate_fn), "
                        "which Accelerate's skip_first_batches builds")
    return ref.owner.take(ref.index)


class TorchDropIn:
    """``torch.utils.data.DataLoader``'s attributes, mixed into :class:`turbofeed.DataLoader`
    (which has ``batch_size``, ``drop_last``, ``shuffle`` and ``dataset`` itself).

    The host provides ``device``, ``_pinned`` (host slots are page-locked),
    ``planner`` (``per_rank()``, ``epoch_batches()``, ``plan()``) and ``book``
    (``upcoming_epoch()``, ``resume_at(batches)``).
    """

    device: torch.device | None  # the host's (declared for type checkers)
    _pinned: bool
    torch_args: TorchArgs
    _arguments: dict[str, Any]  # the constructor's (torch/_torchargs.constructor_arguments)

    @functools.cached_property
    def sampler(self) -> EpochSampler:
        """This rank's order of the next epoch; ``set_epoch`` forwards (:class:`EpochSampler`)."""
        return EpochSampler(cast("DataLoader", self))  # the host is a DataLoader

    @property
    def batch_sampler(self) -> EpochBatchSampler:
        """One entry per batch, for torch code that rebuilds loaders (:class:`EpochBatchSampler`)."""
        return EpochBatchSampler(cast("DataLoader", self))

    @property
    def collate_fn(self) -> Callable[[list], Any]:
        """Hands over the batch of a ``batch_sampler`` entry (:func:`collate_fetched`)."""
        return collate_fetched

    @property
    def num_workers(self) -> int:
        """0: torch counts worker *processes*; turbofeed runs none (its threads: ``num_threads``)."""
        return 0

    @property
    def prefetch_factor(self) -> None:
        """None, as torch's for ``num_workers=0`` (turbofeed's lookahead: ``prefetch``)."""
        return None

    @property
    def persistent_workers(self) -> bool:
        """False: no worker processes to keep."""
        return False

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy (``pickle``, ``copy.deepcopy``) is the loader rebuilt from its constructor
        arguments: its configuration, not its threads, slots or epoch position (a copy
        starts fresh, as a new loader would, and iterates the same data)."""
        return rebuild, (type(self), self._arguments)

    @property
    def timeout(self) -> float:
        """Seconds one batch may take (0: no limit), as given."""
        return self.torch_args.timeout

    @property
    def generator(self) -> torch.Generator | None:
        """The ``torch.Generator`` given (its initial seed is the loader's ``seed``)."""
        return self.torch_args.generator

    worker_init_fn = None  # no worker processes
    multiprocessing_context = None
    pin_memory_device = ""
    in_order = True  # batches always come in order

    @property
    def pin_memory(self) -> bool:
        """Whether batches come back in page-locked host memory (False when delivered on a GPU)."""
        return self._pinned and self.device is None
