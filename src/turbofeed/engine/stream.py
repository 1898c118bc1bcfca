"""Run an epoch plan through the per-sample stage on the worker threads, batch by batch, in order.

Invariant: at most ``prefetch`` batches are in flight (submitted, not yet handed to
the caller), so memory is bounded by ``prefetch`` slots plus the ones the caller holds.
The order of samples inside a batch is fixed by the plan, never by thread timing.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..base.executor import Executor
from ..errors import DatasetError, SampleError
from ..plan import EpochPlan
from .policy import ErrorPolicy, PassPolicy
from .stages import ChunkStage, SampleStage

log = logging.getLogger("turbofeed")

_POLL_S = 0.1
_CLOSE_S = 10.0  # a close waits this long in all for threads finishing their sample


class Job:
    """One batch in flight: which positions, which slot, and how many are left."""

    def __init__(self, index: int, positions: range, slot: Any) -> None:
        self.index = index
        self.positions = positions
        self.slot = slot
        self.ids = np.full(len(positions), -1, dtype=np.int64)  # sample id that filled each slot
        self.ok = np.ones(len(positions), dtype=bool)
        self.error: BaseException | None = None
        self.error_at = len(positions)  # the position whose error ``error`` is
        self._remaining = len(positions)
        self._lock = threading.Lock()
        self.done = threading.Event()
        self.submitted = 0.0  # perf_counter when filled in the caller's thread began (no threads)

    def fail(self, error: BaseException, j: int) -> None:
        """Position ``j`` failed: the batch raises the error of its first failed position,
        whichever thread finished first, so a run raises the same error every time."""
        with self._lock:
            if j < self.error_at:
                self.error, self.error_at = error, j

    def finish_one(self) -> None:
        self.finish_many(1)

    def finish_many(self, count: int) -> None:
        """``count`` positions are done (filled, skipped or failed)."""
        with self._lock:
            self._remaining -= count
            last = self._remaining == 0
        if last:
            self.done.set()

    def __len__(self) -> int:
        return len(self.positions)


class _Runner:
    """What the worker threads run. Holds no reference to the :class:`BatchStream`, so
    dropping the stream (``break``, garbage collection) lets its finalizer stop them."""

    def __init__(self, plan: EpochPlan, fill: Callable[[int, Any, int], None], policy: PassPolicy,
                 fill_chunk: Callable[[Job, int, int], list[int]] | None = None) -> None:
        self.plan = plan
        self.fill = fill
        self.fill_chunk = fill_chunk
        self.policy = policy
        self.stop = threading.Event()
        self.abandon = False  # the pass timed out: close without waiting for the threads

    def run(self, job: Job, j: int) -> None:
        try:
            if j < job.error_at and not self.stop.is_set():  # earlier positions may still fail first
                self._fill_position(job, j)
        except BaseException as exc:  # travels to the caller's thread through the job
            job.fail(exc, j)
        finally:
            job.finish_one()

    def run_many(self, job: Job, start: int, stop: int) -> None:
        """:meth:`run` for positions ``start .. stop - 1``, in order: one task for several."""
        for j in range(start, stop):
            self.run(job, j)

    def run_chunk(self, job: Job, start: int, stop: int) -> None:
        """Positions ``start .. stop - 1`` through the stage's ``fill_chunk`` (one call for
        all), then the positions it left through :meth:`run`, one by one (the policy)."""
        try:
            if start >= job.error_at or self.stop.is_set():
                left: list[int] = []
            else:
                assert self.fill_chunk is not None  # only chunked stages post chunks
                left = self.fill_chunk(job, start, stop)
        except BaseException as exc:  # travels to the caller's thread through the job
            job.fail(exc, start)
            job.finish_many(stop - start)
            return
        job.finish_many(stop - start - len(left))
        for j in left:
            self.run(job, j)

    def _fill_position(self, job: Job, j: int) -> None:
        gid = fill_position(self.plan, job.positions[j], lambda g: self.fill(g, job.slot, j), self.policy)
        if gid is None:
            job.ok[j] = False
        else:
            job.ids[j] = gid


def fill_position(plan: EpochPlan, position: int, fill: Callable[[int], None],
                  policy: ErrorPolicy | PassPolicy) -> int | None:
    """Fill the slot of ``position`` with its sample, applying the bad-sample policy.

    Under ``"replace"`` a bad sample's slot gets the next good sample of the order
    (wrapping around), however long the bad run: order ``a b1 b2 c`` fills ``a c c c``.
    Samples already found bad in this pass (``policy``, a :class:`PassPolicy` shared by
    the pass's workers) are not tried again, so each is decoded, counted and logged once.
    With aspect-ratio buckets (``plan.groups``) the replacement is of the sample's own
    bucket (the batch's shape): the next of the order, else the bucket's next sample by
    id, wrapping around (one another rank or a later epoch holds); a bucket with no good
    sample at all leaves the slot empty (skipped: its batch, all of that bucket, is dropped).

    Returns the sample id that filled the slot (a replacement's under ``"replace"``),
    or None when the sample was skipped (``"skip"``, or a bucket without a good sample).

    Raises:
        SampleError: under ``"raise"``.
        DatasetError: under ``"replace"``, no sample of the whole order is good (at most
            one pass over it); with buckets, the stream raises it once the pass found none.
    """
    if isinstance(policy, ErrorPolicy):
        policy = policy.for_pass()  # a caller without a pass: nothing known bad yet
    order = plan.order
    n = len(order)
    gid = int(order[position])
    first: SampleError | None = None
    if policy.mode == "raise" or not policy.is_bad(position, gid):
        try:
            fill(gid)
            return gid
        except SampleError as err:
            policy.record(err, position, gid)
            if policy.mode == "raise":
                raise
            first = err
    if policy.mode == "skip":
        policy.stats.count("skipped")
        return None
    groups = plan.groups  # aspect-ratio buckets: a replacement of the batch's own bucket (its shape)
    if groups is not None:
        return _bucket_replacement(plan, position, groups, fill, policy)
    tries = plan.replacement_positions(position)  # every other position once, wrapping around
    u = policy.next_unknown(order, tries.start, tries.stop)
    while u is not None:
        gid = int(order[u % n])
        try:
            fill(gid)
        except SampleError as err:
            policy.record(err, u % n, gid)
            first = first or err
            u = policy.next_unknown(order, u + 1, tries.stop)
            continue
        policy.count_replaced(position)
        return gid
    cause = f" (first: {first})" if first is not None else ""
    raise DatasetError(f"no good sample in this rank's {n} samples of the epoch{cause}; "
                       "the dataset looks unreadable") from first


def _bucket_replacement(plan: EpochPlan, position: int, groups: np.ndarray, fill: Callable[[int], None],
                        policy: PassPolicy) -> int | None:
    """:func:`fill_position`'s replacement from the bucket of ``order[position]``: the
    next of this rank's order, else the bucket's ids after it in id order, wrapping
    (the samples other ranks and later epochs hold); None when none is good."""
    order = plan.order
    n = len(order)
    own = int(order[position])
    bucket = int(groups[own])
    if policy.bucket_is_bad(bucket):
        policy.stats.count("skipped")
        return None
    tries = plan.replacement_positions(position)
    u = policy.next_unknown(order, tries.start, tries.stop)
    while u is not None:
        gid = int(order[u % n])
        if groups[gid] == bucket:
            try:
                fill(gid)
                policy.count_replaced(position)
                return gid
            except SampleError as err:
                policy.record(err, u % n, gid)
        u = policy.next_unknown(order, u + 1, tries.stop)
    ids = np.flatnonzero(np.asarray(groups) == bucket)
    cut = int(np.searchsorted(ids, own, side="right"))
    for gid in np.concatenate([ids[cut:], ids[:cut]]).tolist():
        if policy.is_bad(-1, gid):
            continue
        try:
            fill(gid)
            policy.count_replaced(position)
            return gid
        except SampleError as err:
            policy.record(err, None, gid)
    if policy.mark_bucket_bad(bucket):
        log.warning("turbofeed: aspect-ratio bucket %d has no good sample (%d tried): its batches are dropped",
                    bucket, len(ids))
    policy.stats.count("skipped")
    return None


def _shutdown(runner: _Runner, pool: Executor) -> None:
    runner.stop.set()
    # A timed-out pass leaves its threads: each finishes its call alone and exits, and
    # writes only into the slots of batches dropped with the pass, never handed out again.
    pool.close(timeout=0 if runner.abandon else _CLOSE_S)


class BatchStream:
    """Iterator of finished :class:`Job` objects for batches ``start .. len(plan)-1``
    (under ``"replace"``, but for those of an aspect-ratio bucket without a good sample:
    dropped, counted in ``stats.dropped_batches``).

    Args:
        plan: this rank's epoch.
        stage: the per-sample stage: ``acquire()`` an empty buffer for a new batch,
            ``fill(id, buffer, j)`` loads sample ``id`` into position ``j`` (raises
            :class:`SampleError` for a bad sample); its ``info.name`` names the threads.
        policy: what a bad sample does: the pass's :class:`PassPolicy` (shared with
            whatever else handles this pass's samples), or an :class:`ErrorPolicy`, for
            which the stream makes one.
        start: first batch to produce (resume).
        num_workers: worker threads; 0: none, each batch is filled in the caller's
            thread when it asks for it (``torch.utils.data.DataLoader(num_workers=0)``),
            nothing ahead (``prefetch`` does not apply).
        prefetch: batches in flight; with a chunked stage at least enough for a chunk per
            thread (``num_workers * per_task`` positions: 64 threads taking chunks of 16
            of 256-sample batches keep 4 batches in flight), so no thread waits for work.
        timeout: seconds a batch may take (waiting for the threads, or filling it in
            the caller's thread); 0: no limit. Longer raises :class:`TimeoutError`.
    """

    def __init__(self, plan: EpochPlan, stage: SampleStage, policy: ErrorPolicy | PassPolicy,
                 *, start: int = 0, num_workers: int = 4, prefetch: int = 2, timeout: float = 0) -> None:
        if isinstance(policy, ErrorPolicy):
            policy = policy.for_pass()
        self._plan = plan
        self._acquire = stage.acquire
        self._per_task = max(1, stage.info.per_task)
        self._stats = policy.stats
        self._next = start
        self._end = len(plan)
        self._prefetch = max(1, prefetch) if num_workers else 1
        if stage.info.chunked and num_workers and self._next < self._end:
            batch = max(1, len(plan.batch_positions(self._next)))
            self._prefetch = max(self._prefetch, -(-num_workers * self._per_task // batch))
        self._timeout = timeout
        self._inflight: deque[Job] = deque()
        self._pool: Executor | None = None
        self._runner: _Runner | None = None
        self._closed = False
        self.finished = False  # True once every batch was delivered (not merely closed)
        self._chunked = stage.info.chunked
        # "replace" leaves a position empty only for a bucket without a good sample
        self._drop_empty = policy.mode == "replace" and plan.groups is not None
        self._delivered_any = self._dropped_any = False
        if self._next < self._end:
            runner = self._runner = _Runner(plan, stage.fill, policy,
                                            cast(ChunkStage, stage).fill_chunk if self._chunked else None)
        if self._next < self._end and num_workers:
            self._pool = Executor(num_workers, stage.info.name)
            # Break, Ctrl-C or garbage collection: threads stop without the caller asking.
            self._finalizer = weakref.finalize(self, _shutdown, runner, self._pool)

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self) -> Job:
        try:
            job = self._next_job()
            while self._drop_empty and not job.ok.any():
                # a batch of an aspect-ratio bucket without any good sample: no batch of
                # its shape can be made, so it is dropped (as on every rank: the batch is
                # of one bucket on all of them); the other batches go on
                self._stats.count("dropped_batches")
                self._dropped_any = True
                job = self._next_job()
            self._delivered_any = True
            return job
        except StopIteration:
            if self.finished and self._dropped_any and not self._delivered_any:
                raise DatasetError(f"no good sample in this rank's {len(self._plan.order)} samples of the "
                                   "epoch: every batch was dropped; the dataset looks unreadable") from None
            raise
        except BaseException:
            self.close()
            raise

    def _next_job(self) -> Job:
        while self._next < self._end and len(self._inflight) < self._prefetch:
            self._submit(self._next)
            self._next += 1
        if not self._inflight:
            self.finished = not self._closed
            self.close()
            raise StopIteration
        job = self._inflight[0]
        started = time.perf_counter()
        if self._pool is None:  # no threads: the batch was filled in this thread by _submit
            started = job.submitted
        while not job.done.wait(_POLL_S):
            if self._pool is None or not self._pool.alive():
                raise RuntimeError("turbofeed: worker threads stopped before the batch was done")
            if self._timeout and time.perf_counter() - started > self._timeout:
                raise self._timed_out(job)
        waited = time.perf_counter() - started
        if self._timeout and waited > self._timeout:
            raise self._timed_out(job)
        self._stats.add_times(wait=waited)
        self._inflight.popleft()
        if job.error is not None:
            raise job.error
        return job

    def _timed_out(self, job: Job) -> TimeoutError:
        """The error of a batch past ``timeout``; the pass's threads are abandoned, not
        joined (the error comes at the deadline however many of them are stuck)."""
        where = "in the calling thread" if self._pool is None else "on the threads"
        if self._runner is not None:
            self._runner.abandon = True
        return TimeoutError(f"turbofeed: batch {job.index} of the pass took longer than timeout={self._timeout} s "
                            f"({len(job)} samples, {where}); the pass is stopped: look for slow storage or a "
                            "slow transform, or raise timeout=")

    def _submit(self, index: int) -> None:
        positions = self._plan.batch_positions(index)
        job = Job(index, positions, self._acquire())
        self._inflight.append(job)
        pool, runner = self._pool, self._runner
        assert runner is not None  # made in __init__ when there was a batch to submit
        step = self._per_task
        if pool is None:  # num_workers=0: fill it here and now, in order
            job.submitted = time.perf_counter()
            if self._chunked:
                for j in range(0, len(positions), step):
                    runner.run_chunk(job, j, min(j + step, len(positions)))
                return
            for j in range(len(positions)):
                runner.run(job, j)
            return
        if self._chunked:
            for j in range(0, len(positions), step):
                pool.post(runner.run_chunk, job, j, min(j + step, len(positions)))
            return
        if step == 1:
            for j in range(len(positions)):
                pool.post(runner.run, job, j)
            return
        for j in range(0, len(positions), step):
            pool.post(runner.run_many, job, j, min(j + step, len(positions)))

    def close(self) -> None:
        """Stop the workers and drop batches in flight; idempotent, never hangs."""
        self._closed = True
        self._next = self._end
        self._inflight.clear()
        if self._runner is not None:
            self._runner.stop.set()
        if self._pool is not None:
            self._finalizer()
