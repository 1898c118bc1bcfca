"""The one executor: named daemon threads, a stop event, short waits, a close that never hangs.

Every thread turbofeed starts runs on an :class:`Executor`: the engine's per-sample
stages, S3 prefetch and ranged parts, shard indexing and the gds client's transfers.
``concurrent.futures.ThreadPoolExecutor`` would do, except that its threads are joined
without a timeout at interpreter exit and its ``shutdown`` cannot be bounded in time; a
stuck storage request must never hang a training job's exit. Native decode and resize
release the GIL, so threads scale on real work without worker processes to hang or to
duplicate memory.

Bounds: at most ``count`` calls run at once. The queue is bounded by its owners (the
engine never submits more than ``prefetch`` batches; :meth:`Executor.run_all` submits a
finite list), and a queued call holds nothing beyond its arguments.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, CancelledError, Future, wait
from typing import Any, TypeVar

log = logging.getLogger("turbofeed")

T = TypeVar("T")
_POLL_S = 0.1  # how often a blocked thread looks at the stop event
_WAKE = object()  # queued once per thread by close(): an idle thread exits now, not at its next poll
_LIVE: "weakref.WeakSet[Executor]" = weakref.WeakSet()


class ExecutorClosed(RuntimeError):
    """A call was submitted to (or cancelled by) an executor that is closed."""


class Executor:
    """``count`` daemon threads named ``turbofeed-<name>-<i>``, started at the first call.

    Two ways to hand work over:

    - :meth:`submit` returns a :class:`concurrent.futures.Future` (the call's result or
      exception travels through it);
    - :meth:`post` queues ``fn(*args)`` with no future, for hot per-sample work that
      reports its outcome itself (an exception escaping it is logged, never lost).

    Args:
        count: threads (>= 1).
        name: the thread-name stage, e.g. ``decode.cpu``, ``s3-fetch``, ``gds``.
    """

    def __init__(self, count: int, name: str) -> None:
        if count < 1:
            raise ValueError(f"an executor needs at least one thread, got {count}")
        self.count = count
        self.name = name
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # no call slips in between close's stop and its drain
        self._threads: list[threading.Thread] = []
        _LIVE.add(self)

    # -- handing work over ------------------------------------------------------------
    def submit(self, fn: Callable[..., T], *args: Any) -> "Future[T]":
        """Run ``fn(*args)`` on a thread; its result or exception comes through the future.

        Raises:
            ExecutorClosed: after :meth:`close`.
        """
        future: Future[T] = Future()
        self._put((future, fn, args))
        return future

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a thread, no future (``fn`` reports its own outcome).

        Raises:
            ExecutorClosed: after :meth:`close`.
        """
        self._put((None, fn, args))

    def run_all(self, fn: Callable[[T], Any], items: Iterable[T]) -> list[Any]:
        """``[fn(item) for item in items]`` on the threads, results in order.

        One item runs in the caller's thread. On the first error the items not yet
        started are cancelled and the running ones waited for (none still writes into a
        buffer the caller is about to drop), then the error of the earliest failed item
        is raised.

        Raises:
            ExecutorClosed: the executor was closed while items were waiting.
        """
        items = list(items)
        if len(items) <= 1:
            return [fn(item) for item in items]
        futures: list[Future] = []
        try:
            for item in items:  # inside the try: a close half-way still waits for the started ones
                futures.append(self.submit(fn, item))
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in futures:  # in order: the error of the earliest failed item
                if f in done and not f.cancelled() and f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
            if any(f.cancelled() for f in futures):
                raise ExecutorClosed(f"turbofeed: the {self.name} threads were closed during the call")
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()
            wait(futures)

    def _put(self, task: tuple[Future | None, Callable[..., Any], tuple]) -> None:
        with self._lock:
            if self._stop.is_set():
                raise ExecutorClosed(f"turbofeed: the {self.name} threads are closed")
            if not self._threads:
                self._threads = [threading.Thread(target=self._loop, name=f"turbofeed-{self.name}-{i}",
                                                  daemon=True) for i in range(self.count)]
                for t in self._threads:
                    t.start()
            self._tasks.put(task)

    # -- the threads ------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                task = self._tasks.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if task is _WAKE:
                break
            self._run(*task)
            # An idle thread must not keep its last task's callable and arguments (a pass's
            # buffers, a reader's pipeline) alive until the next task comes.
            del task

    @staticmethod
    def _run(future: Future | None, fn: Callable[..., Any], args: tuple) -> None:
        if future is None:
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001 - post()ed work reports its own errors
                log.exception("turbofeed: uncaught error in thread %s", threading.current_thread().name)
            return
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - travels to the caller through the future
            future.set_exception(exc)

    def alive(self) -> bool:
        """True while any thread runs (or none was needed yet and the executor is open)."""
        if not self._threads:
            return not self._stop.is_set()
        return any(t.is_alive() for t in self._threads)

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self, timeout: float = 10.0) -> list[str]:
        """Cancel queued calls, let running ones finish, join; idempotent. ``timeout`` is
        a deadline for all the threads together, not one per thread (16 stuck threads
        must not make a 160 s close); 0 abandons the running calls without waiting (a
        pass past its ``timeout=``). Warns naming any thread still alive after a
        ``timeout`` > 0 (daemon threads: never a hang).

        Returns:
            The names of the threads still running (they exit when their call returns).
        """
        with self._lock:
            self._stop.set()
        while True:  # nothing queued runs after close
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if task is not _WAKE and task[0] is not None:
                task[0].cancel()
                task[0].set_running_or_notify_cancel()  # wakes wait(): cancel() alone does not
        for _ in self._threads:
            self._tasks.put(_WAKE)
        current = threading.current_thread()
        started = [t for t in self._threads if t.ident is not None and t is not current]
        deadline = time.monotonic() + timeout
        for t in started:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in started if t.is_alive()]
        if stuck and timeout > 0:
            log.warning("turbofeed: threads still running %.0f s after close: %s", timeout, stuck)
        return stuck

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._threads)} started"
        return f"Executor({self.name!r}, count={self.count}, {state})"


def result_or_closed(future: "Future[T]") -> T:
    """``future.result()``, with a cancelled call (its executor closed) as :class:`ExecutorClosed`."""
    try:
        return future.result()
    except CancelledError as exc:
        raise ExecutorClosed("turbofeed: the call was cancelled: its threads were closed") from exc


@atexit.register
def _close_all() -> None:
    deadline = time.monotonic() + 2.0  # for all of them: exit waits 2 s at most
    for executor in list(_LIVE):
        executor.close(timeout=max(0.0, deadline - time.monotonic()))
