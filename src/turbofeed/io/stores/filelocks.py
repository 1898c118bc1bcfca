"""Cross-process file locks of the node cache (:mod:`turbofeed.io.stores.cache`): ``flock``s,
which the kernel drops when their process dies, so a lock never outlives its holder."""

from __future__ import annotations

import os

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process locks, still atomic
    fcntl = None  # type: ignore[assignment]  # checked for None before every use

__all__ = ["GONE", "FileLock", "fcntl", "lock_unused", "pin", "remove_file"]


class FileLock:
    """An exclusive ``flock`` on a lock file, tried without blocking."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        if fcntl is None:
            self.fd = fd
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None


GONE = -1  # lock_unused: the file is no longer there


def _same_file(fd: int, path: str) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def pin(fd: int, path: str) -> bool:
    """Take a shared flock on ``fd`` (open on ``path``); False when it is being evicted
    or was (the lock came after the unlink: ``path`` is gone or another file)."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return False
    return _same_file(fd, path)


def lock_unused(path: str) -> int | None:
    """A descriptor holding ``path``'s exclusive flock (nobody has it pinned), None when
    it is in use, or ``GONE``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return GONE
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
    if not _same_file(fd, path):  # replaced meanwhile: count the new file as in use
        os.close(fd)
        return GONE if not os.path.exists(path) else None
    return fd


def remove_file(path: str) -> bool:
    """Unlink ``path``; False when it was already gone (another process got there first)."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
