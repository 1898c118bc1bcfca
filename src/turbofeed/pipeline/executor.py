"""Worker threads with a stop event, short waits, and a close that never hangs.

Native decode and resize release the GIL, so threads scale on real work without
worker processes to hang or to duplicate memory.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger("turbofeed")

_POLL_S = 0.1  # how often a blocked thread looks at the stop event
_WAKE = object()  # queued once per thread by close(): an idle thread exits now, not at its next poll
_LIVE: "weakref.WeakSet[WorkerPool]" = weakref.WeakSet()


class WorkerPool:
    """``num_workers`` daemon threads named ``turbofeed-<stage>-<i>`` running ``run(task)``.

    Bounded by its owner: the owner never submits more than its prefetch allows, so
    the queue holds at most ``prefetch * batch_size`` tasks. ``run`` must not raise;
    it reports failures through the task itself.
    """

    def __init__(self, run: Callable[[Any], None], num_workers: int, stage: str) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(run,), name=f"turbofeed-{stage}-{i}", daemon=True)
            for i in range(num_workers)
        ]
        for t in self._threads:
            t.start()
        _LIVE.add(self)

    def _loop(self, run: Callable[[Any], None]) -> None:
        while not self._stop.is_set():
            try:
                task = self._tasks.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if task is _WAKE:
                break
            run(task)

    def submit(self, task: Any) -> None:
        self._tasks.put(task)

    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def close(self, timeout: float = 10.0) -> None:
        """Stop and join the threads; idempotent. Warns naming any thread still alive."""
        self._stop.set()
        while True:  # drop queued work so nothing runs after close
            try:
                self._tasks.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._tasks.put(_WAKE)
        current = threading.current_thread()
        for t in self._threads:
            if t is not current:
                t.join(timeout)
        stuck = [t.name for t in self._threads if t.is_alive() and t is not current]
        if stuck:
            log.warning("turbofeed: threads still running %.0f s after close: %s", timeout, stuck)


@atexit.register
def _close_all() -> None:
    for pool in list(_LIVE):
        pool.close(timeout=2.0)
