"""Private local copies of whole objects, for indexing a shard the node cache has no room
for (the per-shard index, :mod:`turbofeed.io.stores.shards`; the dataset index,
:mod:`turbofeed.io.dsindex.build`).

A copy gets a unique name (not one per pid and thread id: those are reused, by the next
shard of the same thread, by another container's process with the same pid) in a folder
outside the bounded cache (it may be larger than the whole bound), is checked to hold
exactly the object's size, and is removed when done; copies left by dead processes are
removed after an hour.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..local.private import private_dirs
from .cache import remove_file

if TYPE_CHECKING:
    from .client import S3Client
    from .config import ObjectInfo

_STALE_COPY_S = 3600.0  # a temporary copy this old belongs to a dead process


def check_copy(info: ObjectInfo, fd: int, path: str) -> None:
    """Raise OSError unless the local copy ``path`` (open as ``fd``) holds exactly the
    object's size: never index, nor store an index of, bytes of another file."""
    size = os.fstat(fd).st_size
    if size != info.size:
        raise OSError(f"the local copy {path} holds {size} bytes, the object {info.size}")


@contextmanager
def temporary_copy(client: S3Client, info: ObjectInfo, folder: str,
                   stop: threading.Event | None = None) -> Iterator[tuple[int, str]]:
    """``(fd, path)`` of a private, size-checked copy of ``info``'s object in ``folder``,
    removed on leaving the block.

    Raises:
        RemoteError: the download failed. OSError: the copy's size is not the object's.
    """
    private_dirs(folder)
    _remove_stale(folder)
    fd, path = tempfile.mkstemp(prefix="copy-", suffix=".tar", dir=folder)
    try:
        client.download_to(info.url, info.size, fd, stop, expect=info)
        check_copy(info, fd, path)
        yield fd, path
    finally:
        os.close(fd)
        remove_file(path)


def _remove_stale(folder: str) -> None:
    """Remove temporary copies left by dead processes (live ones write theirs now)."""
    now = time.time()
    for entry in os.scandir(folder):
        try:
            if now - entry.stat().st_mtime > _STALE_COPY_S:
                os.unlink(entry.path)
        except FileNotFoundError:
            pass
