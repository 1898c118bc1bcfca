"""Compressed ``s3://`` tar shards (``.tar.gz``, ``.tgz``, ``.tar.bz2``, ``.tar.xz``): read
from a plain copy in the node cache (:class:`turbofeed.io.local.compressed.PlainCopy`, the
local shards' code).

A compressed object has no random access with ranged GETs (reaching a member means
inflating everything before it), so:

1. the plain copy ``<name>.plain.tar`` (named by URL + ETag + size of the compressed
   object) is taken from the node cache if it is there; otherwise
2. the object is downloaded whole with the client's multi-part download: into the node
   cache (an ordinary cached object, evictable once the plain copy is made) when it
   fits, else into an unlinked temporary file under ``s3-indexing/``, gone when closed;
3. it is decompressed into the node cache through a running byte count
   (:meth:`ShardCache.fill_stream`): the copy counts against the cache's one bound, and
   a copy that would pass it stops there with a :class:`~turbofeed.errors.StorageError`
   naming the bound and how to raise it (never a dropped shard);
4. the plain copy is indexed when the dataset is built (the index cached by URL + ETag
   + size, with the copy's size) and its samples are read from it with ``pread``;
   never a ranged GET.

The copy stays pinned while the dataset reads it; when this process needs room for
another copy, the copies not being read let go and may be evicted, and are made again
when next read. In streaming mode each is made in its block's turn and let go after
its last sample (:mod:`turbofeed.io.stores.stream`). ``.tar.zst`` objects are reported (no
zstd in Python's standard library).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from ..local.compressed import PlainCopy, index_plain
from ..local.private import private_dirs
from .cache import object_name, remove_file
from .config import ObjectInfo

if TYPE_CHECKING:
    from .shards import S3Shards

__all__ = ["open_plain"]


def open_plain(shards: S3Shards, info: ObjectInfo, copy_name: str, key: dict) -> tuple[PlainCopy, dict]:
    """The :class:`PlainCopy` of ``info``'s compressed object (``copy_name``: the node
    cache's name of the compressed object itself) and its index, cached under ``key``
    (URL + ETag + size of the compressed object) as plain shards' indexes are.

    Raises:
        StorageError: the plain copy does not fit in the node cache.
        DatasetError: not a compressed tar, or a corrupt stream.
    """
    plain = PlainCopy(shards.cache, object_name(info.url, info.version, info.size, ".plain.tar"), info.url,
                      lambda: _compressed_copy(shards, info, copy_name), packed=info.size)
    key = {**key, "plain_copy": 2}  # 2: the copy's size recorded
    return plain, index_plain(plain, key, shards._index_path(info), info.url)


@contextlib.contextmanager
def _compressed_copy(shards: S3Shards, info: ObjectInfo, copy_name: str) -> Iterator[BinaryIO]:
    """The compressed object as a local file: the node cache's copy (downloaded there if
    it fits; opened without a pin, so making room for the plain copy may evict it while
    this descriptor still reads it), else an unlinked temporary file."""
    fd = shards.pinned_copy(info)
    if fd is not None:
        try:
            f = open(shards.cache.path(copy_name), "rb")  # the file ``fd`` pins
        finally:
            os.close(fd)
        with f:
            yield f
        return
    private_dirs(shards.scratch)
    fd, path = tempfile.mkstemp(prefix="compressed-", suffix=".part", dir=shards.scratch)
    with os.fdopen(fd, "w+b") as tmp:
        remove_file(path)  # unlinked: its space goes when it is closed, even after a crash
        shards.client.download_to(info.url, info.size, fd, shards._stop, expect=info)
        if os.fstat(fd).st_size != info.size:
            raise OSError(f"{info.url}: the download holds {os.fstat(fd).st_size} bytes, "
                          f"the object {info.size}")
        yield tmp
