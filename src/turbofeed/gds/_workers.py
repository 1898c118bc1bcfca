"""Named daemon threads returning futures, and the chunked transfers of a client on them.

``concurrent.futures.ThreadPoolExecutor`` would do, except that its threads are joined
without a timeout at interpreter exit and its ``shutdown`` cannot be bounded in time;
a stuck storage request must never hang a training job's exit (DESIGN.md).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from typing import Any

from .errors import GDSError

log = logging.getLogger("turbofeed")
_POLL_S = 0.1


class Workers:
    """``count`` daemon threads ``turbofeed-<stage>-<i>`` running submitted calls.

    The threads start on the first :meth:`submit`, so a client that only ever moves
    one chunk at a time never starts any. Invariant: calls running <= ``count``.
    Submitted calls wait in an unbounded queue, but each queued call holds no memory
    beyond its arguments: transfers take their staging buffer when they start.
    """

    def __init__(self, count: int, stage: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # no submit slips in between close's stop and its drain
        self._threads = [threading.Thread(target=self._loop, name=f"turbofeed-{stage}-{i}", daemon=True)
                         for i in range(count)]
        self._started = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._stop.is_set():
                raise GDSError("the client is closed")
            if not self._started:
                for t in self._threads:
                    t.start()
                self._started = True
            self._queue.put((future, fn, args))
        return future

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                future, fn, args = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - travels to the caller through the future
                future.set_exception(exc)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel queued calls, let running ones finish, join; warn naming stuck threads."""
        with self._lock:
            self._stop.set()
        while True:
            try:
                future, _, _ = self._queue.get_nowait()
            except queue.Empty:
                break
            future.cancel()
            future.set_running_or_notify_cancel()  # wakes wait(): cancel() alone does not
        current = threading.current_thread()
        started = [t for t in self._threads if t.ident is not None and t is not current]
        for t in started:
            t.join(timeout)
        stuck = [t.name for t in started if t.is_alive()]
        if stuck:
            log.warning("turbofeed: gds threads still running %.0f s after close: %s", timeout, stuck)


def run_chunks(workers: Workers | None, fn: Callable[[int, int], None], total: int, chunk: int) -> None:
    """Call ``fn(pos, n)`` for each ``chunk``-sized piece of ``[0, total)``.

    A single piece runs in the caller's thread; more go to ``workers``. On the first error the
    pieces not yet started are cancelled and the ones running are waited for (so none
    still writes into a buffer or file the caller is about to drop), then it is raised.
    """
    pieces = [(pos, min(chunk, total - pos)) for pos in range(0, total, chunk)]
    if len(pieces) <= 1 or workers is None:
        for pos, n in pieces:
            fn(pos, n)
        return
    futures: list[Future] = []
    try:
        for pos, n in pieces:
            futures.append(workers.submit(fn, pos, n))
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:  # in order: the error of the earliest failed piece
            if f in done and not f.cancelled():
                error = f.exception()
                if error is not None:
                    raise error
        if any(f.cancelled() for f in futures):
            raise GDSError("the client was closed during the transfer")
    finally:
        for f in futures:
            f.cancel()
        wait(futures)


class Transfers:
    """The chunked transfers of one client: ``depth`` worker threads and ``depth`` slots.

    Invariant: chunks running <= ``depth``, counted by a semaphore that every chunk
    takes, whichever thread runs it (a one-chunk transfer runs in its caller's thread,
    an async operation's thread included). After ``stop`` is set, chunks that have not
    started fail with :class:`GDSError`.
    """

    def __init__(self, depth: int, stop: threading.Event) -> None:
        self.depth = depth
        self._stop = stop
        self._slots = threading.BoundedSemaphore(depth)
        self._workers = Workers(depth, "gds") if depth > 1 else None

    def run(self, fn: Callable[[int, int], None], total: int, chunk: int) -> None:
        """``fn(pos, n)`` over ``[0, total)`` in pieces of ``chunk`` (see :func:`run_chunks`)."""
        def guarded(pos: int, n: int) -> None:
            while not self._slots.acquire(timeout=_POLL_S):
                self.check()
            try:
                self.check()
                fn(pos, n)
            finally:
                self._slots.release()
        run_chunks(self._workers, guarded, total, chunk)

    def check(self) -> None:
        """Raise :class:`GDSError` once the client is closing."""
        if self._stop.is_set():
            raise GDSError("the client was closed during the transfer")

    def close(self) -> None:
        self._stop.set()
        if self._workers is not None:
            self._workers.close()
