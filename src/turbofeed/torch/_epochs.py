"""The epoch bookkeeping of a :class:`turbofeed.DataLoader`: which epoch the next pass
runs, where a resumed epoch continues, and the resume state (``state_dict``).

An object the loader holds (``loader.book``): it owns the position (``epoch``, ``start``,
``batches_done``, ``batches_base``, ``resume``, ``fixed_epoch``, ``next_epoch``) and the
passes (``active``, ``passes``, ``lock``), and asks the loader's planner
(:class:`~turbofeed.torch._planning.LoaderPlanner`) about the plan; the passes report to
it through :meth:`EpochBook.advance` and :meth:`EpochBook.finish_epoch`.

Several passes of one loader may be live at once (a train loader reused for validation
mid-epoch, as torch allows): each keeps its own epoch and position, and the loader's
position (``state_dict``, the epoch of the next pass) is that of the pass that last
delivered a batch or started. E.g. train pass A at batch 5 of epoch 0, then a whole
validation pass B (epoch 1): after B, the state says epoch 2, batch 0; A's next batch
makes it epoch 0, batch 6 again, and A's end makes it epoch 1, batch 0.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..plan import check_data, check_state, make_state

if TYPE_CHECKING:
    from ._iterator import _LoaderIterator
    from .loader import DataLoader

log = logging.getLogger("turbofeed")


class EpochBook:
    """Epochs, resume and the state dict of a loader (see the module docstring).

    Args:
        loader: the loader whose book this is (held weakly: the loader holds the book).
    """

    def __init__(self, loader: DataLoader) -> None:
        self._loader = weakref.proxy(loader)
        # Where the epoch stands (what state_dict reports): the current pass began after
        # ``start`` samples of the global order (non-zero after a resume) and delivered
        # ``batches_done`` batches; ``batches_base`` carries a resumed state's count.
        self.epoch = 0
        self.start = 0
        self.batches_done = 0
        self.batches_base = 0
        self.resume = False  # the next iter() continues at the position above
        self.fixed_epoch: int | None = None  # set_epoch's value, for every later pass
        self.next_epoch = 0  # the epoch of the next pass without set_epoch
        self.lock = threading.Lock()
        self.active: weakref.ref | None = None  # the newest pass
        self.passes: weakref.WeakSet = weakref.WeakSet()  # every pass not garbage-collected

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` in every following pass (every rank must pass the same value).

        Sticky, like ``DistributedSampler.set_epoch``: two iterations after one
        ``set_epoch(5)`` both run epoch 5, in the same order. Without any ``set_epoch``
        each ``iter(loader)`` takes the next epoch (reshuffled). A pass already running
        goes on with its own epoch.

        Right after :meth:`load_state_dict`, the epoch of the state keeps the resume
        position, so the usual loop continues a resumed epoch where it stopped::

            loader.load_state_dict(state)          # saved in epoch 3 after 40 batches
            for epoch in range(state["epoch"], 90):
                loader.set_epoch(epoch)            # epoch 3: batches 40.. ; then 4, 5, ...
                for images, labels in loader: ...

        Any other epoch cancels the resume.
        """
        epoch = int(epoch)
        self.fixed_epoch = epoch
        if self.resume and epoch == self.epoch:
            return
        self.resume = False
        if epoch != self.epoch and not self.live():
            self.epoch, self.start, self.batches_done, self.batches_base = epoch, 0, 0, 0

    @property
    def samples_done(self) -> int:
        """Prefix of this epoch's global order consumed by all ranks together."""
        done = self.start + self.batches_done * self._loader.batch_size * self._loader.world_size
        return min(self._loader.planner.epoch_samples(), done)

    def state_dict(self) -> dict:
        """Where things stand: a small JSON-safe dict (see :meth:`load_state_dict`).

        During a pass (or after one left early): its epoch and the batches it delivered.
        After a pass delivered its whole epoch: the start of the next epoch. Example with
        12 batches per epoch: after 5 batches of epoch 2, ``epoch=2, batches_done=5``;
        after all 12, ``epoch=3, batches_done=0``.
        """
        loader = self._loader
        loader.planner.sync_ranks()
        return make_state(epoch=self.epoch, samples_done=self.samples_done,
                          batches_done=self.batches_base + self.batches_done, seed=loader.seed,
                          world_size=loader.world_size, plan=loader.planner.fingerprint,
                          data=loader.dataset.content_print(), **loader.planner.stream_state())

    def load_state_dict(self, state: dict) -> None:
        """Continue where ``state`` was taken: the next ``iter(loader)`` yields the rest of
        that epoch; the iterations after it run whole epochs again.

        With the world size (and batch size) of the run that saved it, the batches are
        exactly those an uninterrupted run would have produced. With another world size
        (elastic), the rest of the epoch's global order is split over the new ranks: no
        sample is repeated or lost, only the grouping into batches differs. A running
        pass of this loader is superseded (using it then raises ``RuntimeError``). Without
        a later ``set_epoch``, the pass after the resumed one runs the epoch after the state's.

        The state is bound to the data it was saved on (its ``data`` fingerprint: shard
        names, sample keys, member names and sizes, labels; not paths, so a copy of the
        data elsewhere resumes). A state of an earlier turbofeed without one loads with a
        warning.

        Raises:
            ValueError: the state was saved on other data (naming the shard that
                differs), or naming the field that does not match (version, seed, or
                ``plan`` when shuffle, drop_last or the mixing options changed).
        """
        loader = self._loader
        loader.planner.sync_ranks()
        check_data(state, loader.dataset.content_print())
        check_state(state, seed=loader.seed, plan=loader.planner.fingerprint)
        loader.planner.adopt_stream_state(state)
        if state["world_size"] != loader.world_size:
            log.info("turbofeed: elastic resume of epoch %d at sample %d: world size %d -> %d",
                     state["epoch"], state["samples_done"], state["world_size"], loader.world_size)
        with self.lock:
            self.supersede_passes()
            self.epoch = state["epoch"]
            self.start = min(state["samples_done"], loader.planner.epoch_samples())
            self.batches_done = 0
            self.batches_base = state["batches_done"] if state["world_size"] == loader.world_size else 0
            self.resume = True
            self.fixed_epoch = None
            self.next_epoch = self.epoch

    def upcoming_epoch(self) -> int:
        """The epoch the next ``iter(self)`` runs."""
        if self.resume:
            return self.epoch
        return self.next_epoch if self.fixed_epoch is None else self.fixed_epoch

    def resume_at(self, batches: int) -> None:
        """The next ``iter(self)`` runs the upcoming epoch from its batch ``batches``, exactly
        (as :meth:`load_state_dict`): how ``batch_sampler`` skips (Accelerate). Other
        passes go on; none moves the position until that ``iter()``."""
        with self.lock:
            self.epoch = self.upcoming_epoch()
            loader = self._loader
            self.start = min(loader.planner.epoch_samples(), batches * loader.batch_size * loader.world_size)
            self.batches_done, self.batches_base, self.resume = 0, batches, True

    def new_pass(self, make: Callable[[int, int, int], _LoaderIterator]) -> _LoaderIterator:
        """``iter(loader)``: a pass ``make(epoch, start, base)`` of the upcoming epoch (the
        resumed one after :meth:`load_state_dict`); the position follows it."""
        with self.lock:
            if not self.live_passes():  # a running pass may be reading the shards: left as they are
                self._loader._reindex_changed()
            if self.resume:
                epoch, start, base = self.epoch, self.start, self.batches_base
                self.resume = False
            else:
                epoch = self.next_epoch if self.fixed_epoch is None else self.fixed_epoch
                start = base = 0
            it = make(epoch, start, base)
            self.follow(it)
            self.active = weakref.ref(it)
            self.passes.add(it)
        return it

    def follow(self, it: _LoaderIterator) -> None:
        """The position is that of pass ``it`` (caller holds ``lock``)."""
        self.epoch, self.start, self.batches_base = it.epoch, it.start, it.base
        self.batches_done = it.delivered

    def advance(self, it: _LoaderIterator) -> None:
        """Pass ``it`` delivered another batch: the position is its (so the next pass runs
        the epoch after its), unless a resume waits for the next ``iter()``."""
        with self.lock:
            if not self.resume and not it.superseded:
                self.follow(it)
                self.next_epoch = it.epoch + 1

    def finish_epoch(self, it: _LoaderIterator) -> None:
        """Pass ``it`` delivered its whole epoch: the position is the next epoch's start."""
        with self.lock:
            if not self.resume and not it.superseded:
                self.epoch = self.next_epoch = it.epoch + 1
                self.start = self.batches_done = self.batches_base = 0

    def live(self) -> _LoaderIterator | None:
        """The newest pass if it may still yield batches."""
        it = self.active() if self.active else None
        return it if it is not None and not it.done else None

    def live_passes(self) -> list[_LoaderIterator]:
        """Every pass of this loader that may still yield batches."""
        return [it for it in list(self.passes) if not it.done]

    def supersede_passes(self) -> None:
        """Stop every running pass (caller holds ``lock``): a resume replaces
        where they stand; using one afterwards raises."""
        for it in self.live_passes():
            it.supersede()
