"""Compressed ``s3://`` tar shards (``.tar.gz``, ``.tgz``, ``.tar.bz2``, ``.tar.xz``): read
from a plain copy in the node cache.

A compressed object has no random access with ranged GETs (reaching a member means
inflating everything before it), so, when the dataset is built:

1. the plain copy ``<name>.plain.tar`` (named by URL + ETag + size of the compressed
   object) is taken from the node cache, pinned, if it is there; otherwise
2. the object is downloaded whole with the client's multi-part download: into the node
   cache (an ordinary cached object, evictable once the plain copy is made) when it
   fits, else into an unlinked temporary file under ``s3-indexing/``, gone when closed;
3. it is decompressed once by the local shards' code
   (:func:`turbofeed.io.local.compressed.decompress`): a first pass counts the plain
   bytes, a second writes them into a reservation of exactly that size in the node
   cache (:meth:`ShardCache.fill_open`), so the bound holds with the plain copy counted;
4. the plain copy is indexed (the index cached by URL + ETag + size as for plain
   shards) and its samples are read from it with ``pread``; never a ranged GET.

The source keeps its plain copy pinned until it is closed: no eviction removes it
while the dataset may read it. A plain copy the cache cannot hold (larger than the
bound, or the room held by shards in use) is not made: the shard is reported, as a
damaged shard, with a message saying how to raise the bound. ``.tar.zst`` objects are
reported (no zstd in Python's standard library).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from ...errors import DatasetError
from ..local.compressed import decompress
from ..local.index import _build_index, cached_index
from .cache import object_name, remove_file
from .config import ObjectInfo

if TYPE_CHECKING:
    from .shards import S3Shards

__all__ = ["plain_copy", "plain_index", "read_plain"]


def plain_copy(shards: S3Shards, info: ObjectInfo, copy_name: str) -> tuple[int, str] | str:
    """A pinned descriptor and the path of the plain copy of ``info``'s compressed object
    (made now if needed; ``copy_name``: the node cache's name of the compressed object),
    or why there is none (the shard is then reported)."""
    name = object_name(info.url, info.etag, info.size, ".plain.tar")
    fd = shards.cache.open(name)
    if fd is None:
        try:
            fd, why = _make_plain(shards, info, name, copy_name)
        except DatasetError as exc:  # not a compressed tar, or a corrupt stream
            return str(exc).removeprefix(f"{info.url}: ")
        if fd is None:
            return why or "no plain copy"
    return fd, shards.cache.path(name)


def plain_index(shards: S3Shards, info: ObjectInfo, path: str, key: dict) -> dict:
    """The index of the plain copy ``path`` (pinned by the caller), cached under ``key``
    (URL + ETag + size of the compressed object) as plain shards' indexes are."""
    key = {**key, "plain_copy": True}

    def build() -> dict:
        index = _build_index(path)
        index.update(key)
        return index
    return cached_index(shards._index_path(info), key, build, info.url)


def read_plain(fd: int, offset: int, size: int, url: str) -> bytes:
    """``size`` bytes at ``offset`` of the plain copy open as ``fd`` (one ``pread``)."""
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise OSError(f"{url}: short read of its plain copy at {offset} ({len(data)} of {size} bytes)")
    return data


def _make_plain(shards: S3Shards, info: ObjectInfo, name: str,
                copy_name: str) -> tuple[int | None, str | None]:
    """Download and decompress ``info``'s object into the node cache as ``name``: a pinned
    descriptor of the plain copy, or (None, why it is not kept)."""
    with _compressed_copy(shards, info, copy_name) as src:
        counter = _Counter()
        decompress(src, counter, info.url)
        if counter.n > shards.cache.max_bytes:
            return None, _too_small(counter.n, shards.cache.max_bytes)

        def write(fd: int) -> None:
            src.seek(0)
            with os.fdopen(os.dup(fd), "wb") as out:  # the cache's .part, reserved at full size
                decompress(src, out, info.url)
                if out.tell() != counter.n:
                    raise OSError(f"{info.url}: decompressed to {out.tell()} bytes, then {counter.n}")
        fd = shards.cache.fill_open(name, counter.n, write, shards._stop)
        return fd, None if fd is not None else _too_small(counter.n, shards.cache.max_bytes)


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
    os.makedirs(shards.scratch, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix="compressed-", suffix=".part", dir=shards.scratch)
    with os.fdopen(fd, "w+b") as tmp:
        remove_file(path)  # unlinked: its space goes when it is closed, even after a crash
        shards.client.download_to(info.url, info.size, fd, shards._stop, etag=info.etag)
        if os.fstat(fd).st_size != info.size:
            raise OSError(f"{info.url}: the download holds {os.fstat(fd).st_size} bytes, "
                          f"the object {info.size}")
        yield tmp


def _too_small(plain: int, bound: int) -> str:
    return (f"compressed tar whose decompressed copy ({plain} bytes) does not fit in the "
            f"s3:// node cache (bound {bound} bytes, less the shards in use): raise "
            "TURBOFEED_S3_CACHE_SIZE or S3Config(cache_max_bytes=...), or upload the "
            "plain .tar")


class _Counter:
    """A sink that only counts the bytes written to it."""

    def __init__(self) -> None:
        self.n = 0

    def write(self, data: bytes) -> int:
        self.n += len(data)
        return len(data)
