"""The chunked transfers of a client, on :class:`turbofeed.base.executor.Executor` threads.

A transfer of ``n`` bytes is cut into pieces of ``max_transfer_size``; the pieces run on
the client's ``turbofeed-gds-<i>`` threads (one piece: in the caller's thread), at most
``queue_depth`` at once. Closing the client stops a transfer between pieces.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..base.executor import Executor, ExecutorClosed
from .errors import GDSError

_POLL_S = 0.1  # how often a chunk waiting for a slot looks at the stop event
_CLOSED_DURING = "the client was closed during the transfer"


def run_chunks(executor: Executor | None, fn: Callable[[int, int], None], total: int, chunk: int) -> None:
    """Call ``fn(pos, n)`` for each ``chunk``-sized piece of ``[0, total)``.

    A single piece (or no ``executor``) runs in the caller's thread; more go to
    ``executor`` (:meth:`~turbofeed.base.executor.Executor.run_all`). On the first
    error the pieces not yet started are cancelled and the ones running are waited for
    (so none still writes into a buffer or file the caller is about to drop), then the
    error of the earliest failed piece is raised.

    Raises:
        GDSError: the executor was closed (the client closed) during the transfer.
    """
    pieces = [(pos, min(chunk, total - pos)) for pos in range(0, total, chunk)]
    if executor is None:
        for pos, n in pieces:
            fn(pos, n)
        return
    try:
        executor.run_all(lambda piece: fn(*piece), pieces)
    except ExecutorClosed as exc:
        raise GDSError(_CLOSED_DURING) from exc


class Transfers:
    """The chunked transfers of one client: ``depth`` worker threads and ``depth`` slots.

    Invariant: chunks running <= ``depth``, counted by a semaphore that every chunk
    takes, whichever thread runs it (a one-chunk transfer runs in its caller's thread,
    an async operation's thread included). After ``stop`` is set, chunks that have not
    started fail with :class:`GDSError`. The threads (``turbofeed-gds-<i>``) start with
    the first transfer of more than one chunk; a client of ``depth`` 1 starts none.
    """

    def __init__(self, depth: int, stop: threading.Event) -> None:
        self.depth = depth
        self._stop = stop
        self._slots = threading.BoundedSemaphore(depth)
        self.executor = Executor(depth, "gds") if depth > 1 else None

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
        run_chunks(self.executor, guarded, total, chunk)

    def check(self) -> None:
        """Raise :class:`GDSError` once the client is closing."""
        if self._stop.is_set():
            raise GDSError(_CLOSED_DURING)

    def close(self) -> None:
        """Stop chunks not yet started, cancel queued ones, join the threads; idempotent."""
        self._stop.set()
        if self.executor is not None:
            self.executor.close()


__all__ = ["Transfers", "run_chunks"]
