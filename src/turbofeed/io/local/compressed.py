"""Compressed tar shards (``.tar.gz``, ``.tgz``, ``.tar.bz2``, ``.tar.xz``): decompressed once
into the cache directory, then read like plain shards.

Why a plain copy: samples are read in a shuffled order, and a gzip stream has no random
access (reaching a member means inflating everything before it). One sequential pass per
shard version writes a plain tar that the index, the maps and the native decoder then use
as they use any shard; the copy is keyed by the compressed file's identity, so a shard
replaced or rewritten gets a new copy and the old one is removed.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import logging
import lzma
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable
from typing import BinaryIO, Protocol

from ...errors import DatasetError
from ..s3.cache import remove_file  # the node cache's helper: that module imports nothing of turbofeed
from .files import FileId

log = logging.getLogger("turbofeed")

# name -> (magic bytes, opener); zstd is recognised only to be named in the error
_CODECS: dict[str, tuple[bytes, Callable[..., io.BufferedIOBase]]] = {
    "gzip": (b"\x1f\x8b", gzip.open),
    "bzip2": (b"BZh", bz2.open),
    "xz": (b"\xfd7zXZ\x00", lzma.open),
}
_ZSTD = b"\x28\xb5\x2f\xfd"


class Writable(Protocol):
    def write(self, data: bytes, /) -> object: ...


def compression_of(path: str) -> str | None:
    """``"gzip"``, ``"bzip2"`` or ``"xz"`` when ``path`` starts with that format's magic
    bytes, None for anything else (a plain tar, or not a tar at all).

    Raises:
        DatasetError: a zstd-compressed file (no zstd in Python's standard library).
    """
    with open(path, "rb") as f:
        return _codec(f.read(6), path)


def _codec(head: bytes, what: str) -> str | None:
    if head.startswith(_ZSTD):
        raise DatasetError(f"{what}: zstd-compressed; turbofeed reads plain, gzip, bzip2 and xz "
                           "tar shards (decompress it once with `zstd -d`)")
    return next((name for name, (magic, _) in _CODECS.items() if head.startswith(magic)), None)


def decompress(src: BinaryIO, out: Writable, what: str) -> str:
    """Write the decompressed bytes of the compressed tar ``src`` (a binary file at offset
    0) into ``out`` (anything with ``write``); returns the codec. ``what`` names the
    shard in errors. Shared with the ``s3://`` shards (:mod:`turbofeed.io.s3.compressed`).

    Raises:
        DatasetError: not gzip, bzip2 or xz, or the stream is corrupt or cut short.
        OSError: writing ``out`` failed (errno set: a full or read-only disk).
    """
    codec = _codec(src.read(6), what)
    if codec is None:
        raise DatasetError(f"{what}: not a compressed tar")
    src.seek(0)
    try:
        with _CODECS[codec][1](src, "rb") as stream:
            shutil.copyfileobj(stream, out, 1 << 20)
    except (EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
        # the codecs report bad data as EOFError, zlib.error, LZMAError or an OSError
        # without errno; an OSError with one is the output's disk (full, read-only)
        if isinstance(exc, OSError) and exc.errno is not None:
            raise
        raise DatasetError(f"{what}: corrupt or truncated {codec} stream ({exc})") from exc
    return codec


def plain_copy(path: str, identity: FileId, cache_dir: str) -> str:
    """The path of a plain tar holding ``path`` decompressed (made now, or earlier for the
    same version of the file), under ``cache_dir/tar-plain``.

    Raises:
        DatasetError: the compressed stream is corrupt or cut short (names the file).
        OSError: the cache directory is not writable or full.
    """
    name = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:20]
    version = hashlib.sha1(repr(tuple(identity)).encode()).hexdigest()[:12]
    folder = os.path.join(cache_dir, "tar-plain")
    target = os.path.join(folder, f"{name}-{version}.tar")
    if os.path.exists(target):
        return target
    os.makedirs(folder, exist_ok=True)
    log.info("turbofeed: decompressing %s into %s", path, folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{name}-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
            decompress(src, out, path)
        os.replace(tmp, target)  # atomic: a reader sees a whole copy or none
    except BaseException:
        remove_file(tmp)
        raise
    for entry in os.scandir(folder):  # older versions of this shard
        if entry.name.startswith(f"{name}-") and entry.path != target and entry.name.endswith(".tar"):
            remove_file(entry.path)
    return target

