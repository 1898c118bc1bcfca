"""A decode stage's per-batch half one batch ahead of the consumer, on a thread of its own.

The GPU stage's per-batch half (one batched decode, one batched resize: tens of
milliseconds of device work and the host calls that queue it) runs in the consumer's
thread otherwise, where it follows the training step instead of overlapping it: a
70 ms step fed batches whose decode takes 17 ms runs at 70 / 87 of its speed. Here one
thread takes the finished batches from the stream in order, runs the stage's
``prepare`` and hands ``(job, prepared)`` to the consumer, whose thread only runs
``complete`` (its CUDA stream waits for the prepared work) and the later batch stages.

Invariant: at most two prepared batches exist beyond the stream's in-flight ones (one
waiting in the hand-over queue, one being prepared), so device memory stays bounded.
Errors of the stream or of ``prepare`` reach the consumer in order, as the batch they
stand for; closing stops the thread without waiting on a batch in progress past its
deadline.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from .executor import Executor
from .stream import BatchStream, Job

_POLL_S = 0.1
_END = object()  # the stream ended: no more batches


class Ahead:
    """Iterator of ``(job, prepared)``: ``prepare(job)`` of each batch of ``stream``, made
    on the thread ``turbofeed-<name>-ahead-0``.

    Args:
        stream: the pass's batch stream (only this object's thread iterates it).
        prepare: the stage's per-batch work that may run off the consumer's thread.
        name: the stage's name, for the thread's.
    """

    def __init__(self, stream: BatchStream, prepare: Callable[[Job], Any], name: str) -> None:
        self._stream = stream
        self._prepare = prepare
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._pool = Executor(1, f"{name}-ahead")
        self._pool.post(self._run)

    def _run(self) -> None:
        try:
            for job in self._stream:
                if self._stop.is_set():
                    return
                self._hand((job, self._prepare(job)))
            self._hand(_END)
        except BaseException as exc:  # travels to the consumer as the batch it stands for
            self._hand(exc)

    def _hand(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Ahead:
        return self

    def __next__(self) -> tuple[Job, Any]:
        while True:
            try:
                item = self._queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not self._pool.alive():
                    raise RuntimeError("turbofeed: the batch thread stopped before the pass ended") from None
        if item is _END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop the thread (a batch in progress is dropped); idempotent, never hangs."""
        self._stop.set()
        while True:  # a blocked hand-over wakes, and a prepared batch is let go
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._stream.close()
        self._pool.close(timeout=0)
