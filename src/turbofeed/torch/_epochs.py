"""The epoch bookkeeping of a :class:`turbofeed.DataLoader`: which epoch the next pass
runs, where a resumed epoch continues, and the resume state (``state_dict``).

A mixin: the loader holds the fields (``_epoch``, ``_start``, ``_batches_done``,
``_batches_base``, ``_resume``, ``_fixed_epoch``, ``_next_epoch``, ``_active``,
``_passes``, ``_iter_lock``) and the plan (``batch_size``, ``world_size``, ``seed``,
``_fingerprint``, ``dataset``); the passes report to it through ``_advance`` and
``_finish_epoch``.

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
    from ..io import IndexedDataset
    from ._iterator import _LoaderIterator

log = logging.getLogger("turbofeed")


class EpochBook:
    """Epochs, resume and the state dict of a loader (see the module docstring)."""

    dataset: IndexedDataset
    batch_size: int
    world_size: int
    seed: int
    _fingerprint: str
    _epoch: int
    _start: int
    _batches_done: int
    _batches_base: int
    _resume: bool
    _fixed_epoch: int | None
    _next_epoch: int
    _active: weakref.ref | None
    _passes: weakref.WeakSet
    _iter_lock: threading.Lock

    def _epoch_samples(self) -> int:
        """Samples in every epoch's global order."""
        return self.dataset.num_samples

    def _reindex_changed(self) -> None:
        """Before a pass, with no other pass running: re-index shards changed on disk."""

    def _stream_state(self) -> dict[str, Any]:
        """Extra state fields of the order (streaming mode's layout); none by default."""
        return {}

    def _adopt_stream_state(self, state: dict) -> None:
        """Take the order's extra fields from a resumed ``state``."""

    def _sync_ranks(self) -> None:
        """Take the rank and world size the environment says now (between passes)."""

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
        self._fixed_epoch = epoch
        if self._resume and epoch == self._epoch:
            return
        self._resume = False
        if epoch != self._epoch and not self._live():
            self._epoch, self._start, self._batches_done, self._batches_base = epoch, 0, 0, 0

    @property
    def samples_done(self) -> int:
        """Prefix of this epoch's global order consumed by all ranks together."""
        done = self._start + self._batches_done * self.batch_size * self.world_size
        return min(self._epoch_samples(), done)

    def state_dict(self) -> dict:
        """Where things stand: a small JSON-safe dict (see :meth:`load_state_dict`).

        During a pass (or after one left early): its epoch and the batches it delivered.
        After a pass delivered its whole epoch: the start of the next epoch. Example with
        12 batches per epoch: after 5 batches of epoch 2, ``epoch=2, batches_done=5``;
        after all 12, ``epoch=3, batches_done=0``.
        """
        self._sync_ranks()
        return make_state(epoch=self._epoch, samples_done=self.samples_done,
                          batches_done=self._batches_base + self._batches_done, seed=self.seed,
                          world_size=self.world_size, plan=self._fingerprint, data=self.dataset.content_print(),
                          **self._stream_state())

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
        self._sync_ranks()
        check_data(state, self.dataset.content_print())
        check_state(state, seed=self.seed, plan=self._fingerprint)
        self._adopt_stream_state(state)
        if state["world_size"] != self.world_size:
            log.info("turbofeed: elastic resume of epoch %d at sample %d: world size %d -> %d",
                     state["epoch"], state["samples_done"], state["world_size"], self.world_size)
        with self._iter_lock:
            self._supersede_passes()
            self._epoch = state["epoch"]
            self._start = min(state["samples_done"], self._epoch_samples())
            self._batches_done = 0
            self._batches_base = state["batches_done"] if state["world_size"] == self.world_size else 0
            self._resume = True
            self._fixed_epoch = None
            self._next_epoch = self._epoch

    def _upcoming_epoch(self) -> int:
        """The epoch the next ``iter(self)`` runs."""
        if self._resume:
            return self._epoch
        return self._next_epoch if self._fixed_epoch is None else self._fixed_epoch

    def _resume_at(self, batches: int) -> None:
        """The next ``iter(self)`` runs the upcoming epoch from its batch ``batches``, exactly
        (as :meth:`load_state_dict`): how ``batch_sampler`` skips (Accelerate). Other
        passes go on; none moves the position until that ``iter()``."""
        with self._iter_lock:
            self._epoch = self._upcoming_epoch()
            self._start = min(self._epoch_samples(), batches * self.batch_size * self.world_size)
            self._batches_done, self._batches_base, self._resume = 0, batches, True

    def _new_pass(self, make: Callable[..., _LoaderIterator]) -> _LoaderIterator:
        """``iter(loader)``: a pass ``make(loader, epoch, start, base)`` of the upcoming
        epoch (the resumed one after :meth:`load_state_dict`); the position follows it."""
        with self._iter_lock:
            if not self._live_passes():  # a running pass may be reading the shards: left as they are
                self._reindex_changed()
            if self._resume:
                epoch, start, base = self._epoch, self._start, self._batches_base
                self._resume = False
            else:
                epoch = self._next_epoch if self._fixed_epoch is None else self._fixed_epoch
                start = base = 0
            it = make(self, epoch, start, base)
            self._follow(it)
            self._active = weakref.ref(it)
            self._passes.add(it)
        return it

    def _follow(self, it: _LoaderIterator) -> None:
        """The position is that of pass ``it`` (caller holds ``_iter_lock``)."""
        self._epoch, self._start, self._batches_base = it.epoch, it.start, it.base
        self._batches_done = it.delivered

    def _advance(self, it: _LoaderIterator) -> None:
        """Pass ``it`` delivered another batch: the position is its (so the next pass runs
        the epoch after its), unless a resume waits for the next ``iter()``."""
        with self._iter_lock:
            if not self._resume and not it.superseded:
                self._follow(it)
                self._next_epoch = it.epoch + 1

    def _finish_epoch(self, it: _LoaderIterator) -> None:
        """Pass ``it`` delivered its whole epoch: the position is the next epoch's start."""
        with self._iter_lock:
            if not self._resume and not it.superseded:
                self._epoch = self._next_epoch = it.epoch + 1
                self._start = self._batches_done = self._batches_base = 0

    def _live(self) -> _LoaderIterator | None:
        """The newest pass if it may still yield batches."""
        it = self._active() if self._active else None
        return it if it is not None and not it.done else None

    def _live_passes(self) -> list[_LoaderIterator]:
        """Every pass of this loader that may still yield batches."""
        return [it for it in list(self._passes) if not it.done]

    def _supersede_passes(self) -> None:
        """Stop every running pass (caller holds ``_iter_lock``): a resume replaces
        where they stand; using one afterwards raises."""
        for it in self._live_passes():
            it.supersede()
