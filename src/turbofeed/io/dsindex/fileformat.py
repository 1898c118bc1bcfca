"""The dataset index file: numpy arrays at 64-byte aligned offsets and a JSON header.

::

    offset 0    b"TFINDEX1", header offset (uint64 LE), header length (uint64 LE),
                checksum (uint32 LE), zeros to 64
    offset 64   array 0, zeros to the next multiple of 64, array 1, ...
    header      UTF-8 JSON: {"format": "turbofeed.index", "version": 5, "arrays":
                {name: {"dtype": "<u4", "offset": o, "count": n}}, "shards": [...], ...}
    end         the header's last byte is the file's last byte

The header comes last so the arrays can be streamed out before their offsets are all
known. The checksum is the CRC-32C (google-crc32c, the C library) of every byte from
offset 64 to the end, then of the preamble's two offsets: a reader checks it before it
believes anything in the file (9-12 ms for the 36 MB index of 1M samples on a busy
2-core machine, bench/RESULTS.md; read with ``pread`` in 1 MiB pieces, so the check adds
nothing to the process's resident memory). A file that fails it, is cut short, has bytes
after its header or is of another version is refused whole, never half-used.

A reader maps the file once and takes each array as ``np.frombuffer`` over the
map (no copy, no read until a page is touched): the processes of a node that open the
same index share its pages in the page cache.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile

import google_crc32c
import numpy as np

from ...errors import DatasetError

MAGIC = b"TFINDEX1"
FORMAT = "turbofeed.index"
# 2: samples without an image and label members over 64 KiB kept; 3: the checksum, and
# each local shard's whole file identity (device, inode, ctime_ns too); 4: each image's
# height and width (read from its header: aspect-ratio buckets); 5: each JPEG's scan
# verdict (its whole entropy-coded data checked while indexing: loaders skip the check)
VERSION = 5
_ALIGN = 64
_PREAMBLE = struct.Struct("<8sQQI")
_SPAN = struct.Struct("<QQ")
#: What a refusal of a damaged or outdated index ends with (a loader that rebuilds it
#: itself leaves it out).
REBUILD = ": rebuild it with `turbofeed index`"
_PIECE = 1 << 20  # bytes per pread of the check: fits L2, amortises the call


class _Crc:
    """A CRC-32C computed as bytes go by."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, data: bytes) -> bytes:
        self.value = google_crc32c.extend(self.value, data)
        return data


def temp_prefix(path: str) -> str:
    """How the temporary files of writes of ``path`` start (``.turbofeed.index-``): one
    left by a process killed mid-write is known by it (:func:`remove_temporaries`)."""
    return "." + os.path.basename(path) + "-"


def remove_temporaries(path: str) -> int:
    """Remove what killed writes of ``path`` left (their temporary files; never read as an
    index, whose name they do not have). Only safe while holding the build lock of
    ``path`` (:mod:`turbofeed.io.dsindex.lock`): no live write then. Returns how many."""
    folder, prefix, removed = os.path.dirname(os.path.abspath(path)), temp_prefix(path), 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            try:
                os.unlink(os.path.join(folder, name))
                removed += 1
            except OSError:
                pass
    return removed


def write_index(path: str, header: dict, arrays: dict[str, np.ndarray]) -> int:
    """Write ``arrays`` and ``header`` (plus ``format``, ``version`` and ``arrays``) to
    ``path`` atomically: a temporary file in the same folder (named by
    :func:`temp_prefix`), renamed when complete, so a reader never maps half an index.
    Returns the file's size in bytes.

    Raises:
        OSError: the folder cannot be written.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=temp_prefix(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            crc = _Crc()
            f.write(b"\0" * _ALIGN)
            described = {}
            for name, array in arrays.items():
                array = np.ascontiguousarray(array)
                if array.dtype.byteorder == ">":  # stored little-endian, as the header says
                    array = array.astype(array.dtype.newbyteorder("<"))
                described[name] = {"dtype": array.dtype.str, "offset": f.tell(), "count": int(array.size)}
                f.write(crc.add(array.tobytes()))
                f.write(crc.add(b"\0" * (-f.tell() % _ALIGN)))
            text = json.dumps({**header, "format": FORMAT, "version": VERSION, "arrays": described},
                              separators=(",", ":")).encode()
            at = f.tell()
            f.write(crc.add(text))
            size = f.tell()
            crc.add(_SPAN.pack(at, len(text)))
            f.seek(0)
            f.write(_PREAMBLE.pack(MAGIC, at, len(text), crc.value))
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from the other users of the data
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return size


def read_index(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """``(header, arrays)`` of the index at ``path``, the arrays read-only views of one
    shared map of the file, once its checksum has been checked.

    Raises:
        DatasetError: not a turbofeed index, one of another format version, or a damaged
            one (cut short, bytes added, a checksum that fails, arrays out of place).
        OSError: it cannot be opened or read.
    """
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        if size < _ALIGN:
            raise DatasetError(f"{path}: not a turbofeed dataset index ({size} bytes)")
        magic, at, length, stored = _PREAMBLE.unpack(os.pread(fd, _PREAMBLE.size, 0))
        if magic != MAGIC:
            raise DatasetError(f"{path}: not a turbofeed dataset index")
        if not _ALIGN <= at <= size or at + length != size:
            raise DatasetError(f"{path}: damaged dataset index (its header is not where the file says: "
                               "cut short or added to)")
        try:
            header = json.loads(os.pread(fd, length, at))
        except ValueError:
            header = None  # a damaged header: the checksum says so below (unless the version does)
        if isinstance(header, dict) and (header.get("format"), header.get("version")) != (FORMAT, VERSION):
            raise DatasetError(f"{path}: dataset index format version {header.get('version')!r}, this turbofeed "
                               f"reads version {VERSION}{REBUILD}")
        if checksum(fd, size, at, length) != stored:
            raise DatasetError(f"{path}: damaged dataset index (checksum mismatch){REBUILD}")
        if not isinstance(header, dict):
            raise DatasetError(f"{path}: unreadable dataset index header")
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    arrays = {}
    for name, a in header["arrays"].items():
        dtype = np.dtype(a["dtype"])
        if a["offset"] < _ALIGN or a["offset"] + a["count"] * dtype.itemsize > at:
            raise DatasetError(f"{path}: array {name} lies outside the arrays (a damaged index)")
        arrays[name] = np.frombuffer(mapped, dtype, count=a["count"], offset=a["offset"])
    return header, arrays


def checksum(fd: int, size: int, header_at: int, length: int) -> int | None:
    """The checksum of the index open at ``fd`` (``size`` bytes, its header at
    ``header_at``, ``length`` bytes; see the module docstring); None when the file
    shrank while it was read."""
    crc = _Crc()
    at = _ALIGN
    while at < size:
        piece = os.pread(fd, min(_PIECE, size - at), at)
        if not piece:
            return None
        crc.add(piece)
        at += len(piece)
    crc.add(_SPAN.pack(header_at, length))
    return crc.value
