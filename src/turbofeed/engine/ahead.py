"""A decode stage's per-batch half ahead of the consumer, in steps, each step on a thread
of its own.

The GPU stage's per-batch half (one batched decode, then one batched resize: tens of
milliseconds of device work and the host calls that queue it) runs in the consumer's
thread otherwise, where it follows the training step instead of overlapping it: a
70 ms step fed batches whose decode takes 17 ms runs at 70 / 87 of its speed. Here one
thread takes the finished batches from the stream in order and runs the stage's first
step (the decoder call, which waits on the decoder without the GIL), and the next
thread runs the second (the batched resize's host calls) on the batch before, so the
two overlap too: a batch costs the longer of the two, not their sum. The consumer's
thread only runs ``complete`` (its CUDA stream waits for the prepared work) and the
later batch stages.

Invariant: at most one batch waits between two steps and one after the last, beside
the one each step's thread works on, so device memory stays bounded (three batches'
decoded images and two batches' outputs at most, past the stream's in-flight ones).
Errors of the stream or of a step reach the consumer in order, as the batch they stand
for (a later step passes them on untouched); closing stops the threads without waiting
on a batch in progress past its deadline.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..base.executor import Executor
from .stream import BatchStream, Job

_POLL_S = 0.1
_END = object()  # the stream ended: no more batches


class Ahead:
    """Iterator of ``(job, prepared)``: each batch of ``stream`` through ``steps``, the
    first as ``steps[0](job)``, each next as ``steps[i](job, what the step before made)``,
    step ``i`` on the thread ``turbofeed-<name>-ahead-<i>-0``.

    Args:
        stream: the pass's batch stream (only the first step's thread iterates it).
        steps: the stage's per-batch work that may run off the consumer's thread, in order.
        name: the stage's name, for the threads'.
    """

    def __init__(self, stream: BatchStream, steps: Sequence[Callable[..., Any]], name: str) -> None:
        self._stream = stream
        self._stop = threading.Event()
        # queue i holds what step i made (the last one: what the consumer takes)
        self._queues: list[queue.Queue[Any]] = [queue.Queue(maxsize=1) for _ in steps]
        self._pools = [Executor(1, f"{name}-ahead-{i}") for i in range(len(steps))]
        self._pools[0].post(self._run, steps[0], ((job, None) for job in stream), self._queues[0], True)
        for i in range(1, len(steps)):
            self._pools[i].post(self._run, steps[i], self._taken(self._queues[i - 1]), self._queues[i], False)

    def _taken(self, source: queue.Queue[Any]) -> Iterable[Any]:
        """What the step before handed over, in order, up to its end or an error."""
        while not self._stop.is_set():
            try:
                item = source.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            yield item
            if item is _END or isinstance(item, BaseException):
                return

    def _run(self, step: Callable[..., Any], items: Iterable[Any], out: queue.Queue[Any], first: bool) -> None:
        try:
            for item in items:
                if self._stop.is_set():
                    return
                if item is _END or isinstance(item, BaseException):  # passed on as it is
                    self._hand(out, item)
                    return
                job, made = item
                self._hand(out, (job, step(job) if first else step(job, made)))
            if first:
                self._hand(out, _END)
        except BaseException as exc:  # travels to the consumer as the batch it stands for
            self._hand(out, exc)

    def _hand(self, out: queue.Queue[Any], item: Any) -> None:
        while not self._stop.is_set():
            try:
                out.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Ahead:
        return self

    def __next__(self) -> tuple[Job, Any]:
        while True:
            try:
                item = self._queues[-1].get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not all(pool.alive() for pool in self._pools):
                    raise RuntimeError("turbofeed: a batch thread stopped before the pass ended") from None
        if item is _END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop the threads (batches in progress are dropped); idempotent, never hangs."""
        self._stop.set()
        for q in self._queues:  # a blocked hand-over wakes, and prepared batches are let go
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        self._stream.close()
        for pool in self._pools:
            pool.close(timeout=0)
