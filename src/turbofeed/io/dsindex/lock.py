"""One build of a dataset index per node: the process that builds it holds an exclusive
``flock`` on a lock file beside it (``.turbofeed.index.lock``; in the private index cache
when the index goes there); the others wait for the lock, then map the file it wrote.

Why ``flock``: the kernel releases it when its holder dies, however it dies (SIGKILL
included), so a lock is never left held. A killed builder leaves at most a temporary file
(:func:`~.fileformat.remove_temporaries` removes it under the lock) and never a file under
the index's name: that is only ever written by a rename of a complete file. The lock file
itself stays (removing it would let a third process lock a new file while a second still
holds the old one).

The wait is bounded (``$TURBOFEED_INDEX_WAIT`` seconds, default 1800, more than a build of
tens of millions of samples takes): one INFO line when it starts, a warning each minute it
goes on, and when it runs out the waiter builds the index in memory for itself (a warning
says so) rather than hang.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator

log = logging.getLogger("turbofeed")

WAIT_ENV = "TURBOFEED_INDEX_WAIT"
DEFAULT_WAIT_S = 1800.0
_NAG_S = 60.0


def lock_path(target: str) -> str:
    """The lock file of the index ``target``."""
    folder, name = os.path.split(os.path.abspath(target))
    return os.path.join(folder, "." + name + ".lock")


def wait_limit() -> float:
    """Seconds a process waits for another's build (``$TURBOFEED_INDEX_WAIT``)."""
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


@contextlib.contextmanager
def build_lock(target: str, wait: float | None = None) -> Iterator[bool]:
    """Hold the build lock of the index ``target`` while the block runs; yields True, or
    False when it could not be had (the lock file cannot be created: a folder this user
    cannot write; or another process held it past ``wait`` seconds, default
    :func:`wait_limit`): the caller then writes nothing."""
    path = lock_path(target)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        log.debug("turbofeed: cannot create the lock file %s: %s", path, exc)
        yield False
        return
    try:
        held = _acquire(fd, target, wait_limit() if wait is None else wait)
        try:
            yield held
        finally:
            if held:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _try_lock(fd: int) -> bool:
    """Take the lock on ``fd`` if no other process holds it, without waiting."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _acquire(fd: int, target: str, wait: float) -> bool:
    if _try_lock(fd):
        return True
    started = time.monotonic()
    log.info("turbofeed: another process is building the dataset index %s; waiting for it (up to %.1f s)",
             target, wait)
    nag, pause = started + _NAG_S, 0.01
    while True:
        time.sleep(pause)
        pause = min(0.2, pause * 2)
        if _try_lock(fd):
            return True
        now = time.monotonic()
        if now - started >= wait:
            log.warning("turbofeed: waited %.1f s for another process building the dataset index %s "
                        "(%s); indexing the shards in memory for this process", now - started, target, WAIT_ENV)
            return False
        if now >= nag:
            nag = now + _NAG_S
            log.warning("turbofeed: still waiting for another process building the dataset index %s "
                        "(%.0f s so far)", target, now - started)
