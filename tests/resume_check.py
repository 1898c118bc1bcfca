"""The shared resume check (issue 38, item 5): every stateful part (the DataLoader, each
sampling plan, the DALI reader) passes the same test of exact mid-epoch resume.

``check_resume(make, stops=...)`` runs ``make()``'s object without a break, then, for each
stop point k (steps into the run, epoch boundaries included), runs a fresh ``make()`` k
steps, saves its state, gives it to a new object and lets that one run to the end: the two
pieces must be the uninterrupted run. A :class:`Kind` says how to drive one kind of
object: ``LOADER``, ``PLAN`` (a :class:`PlanRun`, which steps a pure plan's ``start=`` as
the loader does) and ``DALI`` are here. Tests import it as they import ``builders``
(``pythonpath = ["tests"]``)::

    from resume_check import check_resume

    def test_resume_is_exact(shards):
        make = lambda: turbofeed.DataLoader(shards, batch_size=16, shuffle=True, return_keys=True)
        result = check_resume(make, stops=[0, 3, 8, 11], epochs=2)  # 8 batches an epoch
        assert all(run.state["epoch"] == 0 for run in result.runs[:2])
"""

from __future__ import annotations

import dataclasses
import json
import reprlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

_short = reprlib.Repr()
_short.maxstring, _short.maxother = 60, 60


def _json(state: Any) -> Any:
    """A state as a checkpoint in JSON stores it (what the loader's state promises)."""
    return json.loads(json.dumps(state))


def _load_state(make: Callable[[], Any], state: Any) -> Any:
    obj = make()
    obj.load_state_dict(state)
    return obj


def batch_keys(batch: Any) -> list:
    """The sample keys of a loader batch: ``batch["__key__"]`` of dict batches (``fields=``),
    else the last element (``return_keys=True``)."""
    return list(batch["__key__"] if isinstance(batch, dict) else batch[-1])


@dataclasses.dataclass(frozen=True)
class Kind:
    """How :func:`check_resume` drives one kind of stateful object.

    Attributes:
        run: ``run(obj, epoch)``, one pass over the object: the steps of the run's epoch
            ``epoch`` (0 for the run's first), or of the rest of it for a resumed object.
        keys: the ids of one step, compared between the runs (a list).
        save: the object's state after the steps taken.
        restore: ``restore(make, state)``: a new object, from the factory, resumed at ``state``.
        round_trip: the state as it comes back from where it is kept (JSON for the loader).
        rolls_over: a state saved after an epoch's last step (before the pass ended) is the
            next epoch's start (the loader); False where the resumed object's first pass
            is that epoch's empty rest (DALI ends it with ``StopIteration``).
    """

    run: Callable[[Any, int], Iterable]
    keys: Callable[[Any], Sequence] = batch_keys
    save: Callable[[Any], Any] = lambda obj: obj.state_dict()
    restore: Callable[[Callable[..., Any], Any], Any] = _load_state
    round_trip: Callable[[Any], Any] = _json
    rolls_over: bool = True

    def but(self, **changes: Any) -> Kind:
        return dataclasses.replace(self, **changes)


def loader_passes(set_epoch: int | None = None) -> Callable[[Any, int], Iterable]:
    """A pass of a loader: ``iter(loader)``; with ``set_epoch``, the training loop's
    ``loader.set_epoch(set_epoch + epoch)`` first (which keeps a resume point)."""

    def run(loader: Any, epoch: int) -> Iterable:
        if set_epoch is not None:
            loader.set_epoch(set_epoch + epoch)
        return iter(loader)

    return run


LOADER = Kind(run=loader_passes())
"""A ``turbofeed.DataLoader`` (or anything with its contract): each ``iter()`` a pass,
``state_dict()`` JSON-safe, ``load_state_dict()`` on a new one."""


class PlanRun:
    """A pure sampling plan stepped as the loader steps it, so that :func:`check_resume`
    checks its ``start=``. ``order(rank=, world_size=, epoch=, start=)`` is a rank's order of
    an epoch from global position ``start`` (the samples every rank consumed), or an
    :class:`~turbofeed.plan.EpochPlan` whose ``order`` it is. A step is one global batch:
    ``batch_size`` ids of each rank, rank 0's first. The state is the loader's position: ``{"epoch", "samples_done"}``; after an epoch's last step, the next
    epoch's start."""

    def __init__(self, order: Callable[..., Sequence], *, world_size: int = 1, batch_size: int = 1,
                 epoch: int = 0) -> None:
        self.order, self.world_size, self.batch_size = order, world_size, batch_size
        self.epoch, self.start = epoch, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "samples_done": self.start}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.start = state["epoch"], state["samples_done"]

    def __iter__(self) -> Iterator[list[int]]:
        epoch, start, b = self.epoch, self.start, self.batch_size
        orders = [self.order(rank=r, world_size=self.world_size, epoch=epoch, start=start)
                  for r in range(self.world_size)]
        orders = [[int(x) for x in getattr(o, "order", o).tolist()] for o in orders]  # lazy ones too
        steps = -(-max(len(o) for o in orders) // b)
        for i in range(steps):
            if i == steps - 1:
                self.epoch, self.start = epoch + 1, 0
            else:
                self.start = start + (i + 1) * b * self.world_size
            yield [x for o in orders for x in o[i * b:(i + 1) * b]]
        if not steps:
            self.epoch, self.start = epoch + 1, 0


PLAN = LOADER.but(keys=lambda ids: ids)
"""A :class:`PlanRun`: the ids of each global batch."""


def dali_epoch(pipe: Any) -> Iterator[tuple[list[str], list[int], list]]:
    """``pipe.run()`` to the epoch's ``StopIteration`` (then ``reset()``): each batch's
    (keys, labels, data) of a reader with ``return_keys=True`` giving (data, labels, keys),
    read out at once (DALI reuses its output buffers)."""
    import numpy as np

    while True:
        try:
            data, labels, keys = pipe.run()
        except StopIteration:
            pipe.reset()
            return
        yield ([bytes(np.array(keys[i])).decode() for i in range(len(keys))],
               [int(np.array(labels[i]).reshape(-1)[0]) for i in range(len(labels))],
               [np.array(data[i]) for i in range(len(data))])


DALI = Kind(run=lambda pipe, epoch: dali_epoch(pipe), keys=lambda step: step[0], save=lambda pipe: pipe.checkpoint(),
            restore=lambda make, state: make(checkpoint=state), round_trip=lambda state: state, rolls_over=False)
"""A DALI pipeline of ``turbofeed.dali.reader(..., return_keys=True)`` giving (data, labels,
keys), built with ``enable_checkpointing=True``: ``make(checkpoint=None)`` builds one,
``pipe.checkpoint()`` is its state."""


@dataclasses.dataclass
class Stop:
    """One stop point: ``stop`` steps in (``step`` steps into the run's epoch ``epoch``);
    ``state`` the state saved there (as loaded), ``head`` the steps before it, ``tail`` the
    resumed object's, ``end`` its state once they are done."""

    stop: int
    epoch: int
    step: int
    state: Any
    head: list
    tail: list
    end: Any

    @property
    def steps(self) -> list:
        return self.head + self.tail


@dataclasses.dataclass
class Resumed:
    """What :func:`check_resume` ran: ``epochs``, the uninterrupted run's steps per epoch;
    ``runs``, one :class:`Stop` per stop point. Steps are what ``kind.run`` yields (the
    loader's batches), for the caller's own asserts (pixels, labels)."""

    epochs: list[list]
    runs: list[Stop]

    @property
    def steps(self) -> list:
        return [s for epoch in self.epochs for s in epoch]


def _close(obj: Any) -> None:
    close = getattr(obj, "close", None)
    if callable(close):
        close()


def _where(cuts: list[int], k: int) -> tuple[int, int]:
    """(epoch, steps into it) of the first k steps: at an epoch's end, that epoch, whole."""
    epoch = 0
    while epoch < len(cuts) - 2 and k > cuts[epoch + 1]:
        epoch += 1
    return epoch, k - cuts[epoch]


def check_resume(make: Callable[..., Any], *, stops: Iterable[int], epochs: int = 1, kind: Kind = LOADER,
                 then: Callable[..., Any] | None = None, elastic: bool = False, may_lose: int = 0,
                 may_repeat: int = 0) -> Resumed:
    """Check that ``make()``'s object resumes exactly at each of ``stops``.

    ``make()`` builds a fresh object (``make(checkpoint=None)`` for ``DALI``). The
    uninterrupted run is ``epochs`` passes of one. For each stop k (steps into the run,
    across epochs; negative counts from its end), a fresh object takes exactly k steps:
    earlier epochs' passes to their end, then k' steps of the next (so a stop at an
    epoch's end saves after its last step, before the pass ends). Its state, round-tripped
    as ``kind`` says (JSON for the loader), goes to a new object from ``then`` (default
    ``make``: ``then`` is another world size, the data copied elsewhere), which runs the
    rest of that epoch and the later ones.

    Exact (default): the steps before and after the stop are the uninterrupted run, step
    by step. ``elastic=True`` (another world size: other batches) compares each epoch's
    multiset of keys instead: every sample as often as in the uninterrupted epoch, up to
    ``may_lose`` keys lost (``drop_last`` on the new ranks) and ``may_repeat`` repeated
    (their padding). A failure names the stop point and the first step and position
    that differ.

    Returns:
        a :class:`Resumed` with every run's steps, for the caller's own asserts.

    Example::

        def test_exact_and_elastic():
            plan = lambda rank, world_size, epoch, start: rank_order(
                120, seed=1, epoch=epoch, shuffle=True, rank=rank, world_size=world_size, start=start)
            four = lambda: PlanRun(plan, world_size=4, batch_size=5)   # 6 global batches an epoch
            check_resume(four, stops=[0, 2, 6, 9], epochs=2, kind=PLAN)
            three = lambda: PlanRun(plan, world_size=3, batch_size=5)  # 80 left: 27 a rank, 1 padded
            check_resume(four, stops=[2], kind=PLAN, then=three, elastic=True, may_repeat=1)
    """
    then = then or make
    whole = make()
    full = [list(kind.run(whole, e)) for e in range(epochs)]
    _close(whole)
    cuts = [0]
    for steps in full:
        cuts.append(cuts[-1] + len(steps))
    total = cuts[-1]
    want = [kind.keys(s) for steps in full for s in steps]
    runs = []
    for k in stops:
        k = total + k if k < 0 else k
        assert 0 <= k <= total, f"stop {k} outside the uninterrupted run's {total} steps"
        runs.append(_one_stop(make, then, kind, full, want, cuts, k, elastic, may_lose, may_repeat))
    return Resumed(full, runs)


def _one_stop(make, then, kind: Kind, full: list[list], want: list, cuts: list[int], k: int, elastic: bool,
              may_lose: int, may_repeat: int) -> Stop:
    epoch, step = _where(cuts, k)
    where = f"stop {k} (epoch {epoch}, after step {step} of {len(full[epoch])})"
    first = make()
    head: list = []
    for e in range(epoch):
        head += list(kind.run(first, e))
    it = iter(kind.run(first, epoch)) if step else None  # a stop at 0: saved before any pass
    head += [next(it) for _ in range(step)]
    state = kind.round_trip(kind.save(first))
    _close(it)
    _close(first)
    _same(f"{where}: the steps before it", [kind.keys(s) for s in head], want[:k], cuts)
    resumed = kind.restore(then, state)
    at_end = step == len(full[epoch]) and kind.rolls_over  # the resumed object starts the next epoch
    passes = [list(kind.run(resumed, e)) for e in range(epoch + at_end, len(full))]
    end = kind.round_trip(kind.save(resumed))
    _close(resumed)
    tail = [s for p in passes for s in p]
    if not elastic:
        _same(f"{where}: the resumed run", [kind.keys(s) for s in head + tail], want, cuts)
    else:
        if not at_end:  # the epoch of the stop: its steps before it, then the resumed pass
            passes[0] = head[cuts[epoch]:] + passes[0]
        for e, steps in zip(range(epoch + at_end, len(full)), passes):
            _same_samples(f"{where}: epoch {e}", [x for s in steps for x in kind.keys(s)],
                          [x for s in full[e] for x in kind.keys(s)], may_lose, may_repeat)
    return Stop(k, epoch, step, state, head, tail, end)


def _same(what: str, got: list, want: list, cuts: list[int]) -> None:
    """Step by step: the first step and position that differ, named."""
    if got == want:
        return
    for i, (a, b) in enumerate(zip(got, want)):
        a, b = list(a), list(b)
        if a != b:
            p = next((p for p, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            epoch, step = _where(cuts, i + 1)
            raise AssertionError(
                f"{what} differs at step {i} (epoch {epoch}, step {step - 1}), position {p}: got "
                f"{_short.repr(a[p:p + 3])} ({len(a)} keys), the uninterrupted run {_short.repr(b[p:p + 3])} "
                f"({len(b)} keys)")
    if len(got) != len(want):
        extra = got[len(want):] or want[len(got):]
        raise AssertionError(f"{what} has {len(got)} steps, the uninterrupted run {len(want)}; the first "
                             f"{'extra' if len(got) > len(want) else 'missing'}: {_short.repr(list(extra[0]))}")


def _same_samples(what: str, got: list, want: list, may_lose: int, may_repeat: int) -> None:
    """Each key as often as in the uninterrupted epoch, up to ``may_lose`` fewer and
    ``may_repeat`` more."""
    lost = Counter(want) - Counter(got)
    extra = Counter(got) - Counter(want)
    if lost.total() > may_lose or extra.total() > may_repeat:
        raise AssertionError(
            f"{what}: {lost.total()} keys lost (at most {may_lose}), first {_short.repr(list(lost)[:3])}; "
            f"{extra.total()} more than in the uninterrupted epoch (at most {may_repeat}), first "
            f"{_short.repr(list(extra)[:3])}; {len(got)} keys against {len(want)}")
