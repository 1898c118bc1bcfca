"""The dataset index file: numpy arrays at 64-byte aligned offsets and a JSON header.

::

    offset 0    b"TFINDEX1", header offset (uint64 LE), header length (uint64 LE), zeros to 64
    offset 64   array 0, zeros to the next multiple of 64, array 1, ...
    header      UTF-8 JSON: {"format": "turbofeed.index", "version": 2, "arrays":
                {name: {"dtype": "<u4", "offset": o, "count": n}}, "shards": [...], ...}

The header comes last so the arrays can be streamed out before their offsets are all
known. A reader maps the file once and takes each array as ``np.frombuffer`` over the
map (no copy, no read until a page is touched): the processes of a node that open the
same index share its pages in the page cache.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile

import numpy as np

from ...errors import DatasetError

MAGIC = b"TFINDEX1"
FORMAT = "turbofeed.index"
VERSION = 2  # 2: samples without an image and with label members over 64 KiB kept
_ALIGN = 64
_PREAMBLE = struct.Struct("<8sQQ")


def write_index(path: str, header: dict, arrays: dict[str, np.ndarray]) -> int:
    """Write ``arrays`` and ``header`` (plus ``format``, ``version`` and ``arrays``) to
    ``path`` atomically: a temporary file in the same folder, renamed when complete, so a
    reader never maps half an index. Returns the file's size in bytes.

    Raises:
        OSError: the folder cannot be written.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".turbofeed-index-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0" * _ALIGN)
            described = {}
            for name, array in arrays.items():
                array = np.ascontiguousarray(array)
                if array.dtype.byteorder == ">":  # stored little-endian, as the header says
                    array = array.astype(array.dtype.newbyteorder("<"))
                described[name] = {"dtype": array.dtype.str, "offset": f.tell(), "count": int(array.size)}
                f.write(array.tobytes())
                f.write(b"\0" * (-f.tell() % _ALIGN))
            text = json.dumps({**header, "format": FORMAT, "version": VERSION, "arrays": described},
                              separators=(",", ":")).encode()
            at = f.tell()
            f.write(text)
            size = f.tell()
            f.seek(0)
            f.write(_PREAMBLE.pack(MAGIC, at, len(text)))
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
    shared map of the file.

    Raises:
        DatasetError: not a turbofeed index, a version this turbofeed does not read, or a
            file cut short.
        OSError: it cannot be opened.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < _ALIGN:
            raise DatasetError(f"{path}: not a turbofeed dataset index ({size} bytes)")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    magic, at, length = _PREAMBLE.unpack_from(mapped, 0)
    if magic != MAGIC or at + length > size:
        raise DatasetError(f"{path}: not a turbofeed dataset index, or cut short")
    try:
        header = json.loads(mapped[at:at + length])
    except ValueError as exc:
        raise DatasetError(f"{path}: unreadable dataset index header ({exc})") from exc
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise DatasetError(f"{path}: dataset index version {header.get('version')!r}, this turbofeed "
                           f"reads version {VERSION}")
    arrays = {}
    for name, a in header["arrays"].items():
        dtype = np.dtype(a["dtype"])
        if a["offset"] + a["count"] * dtype.itemsize > at:
            raise DatasetError(f"{path}: array {name} lies past the arrays' end (a damaged index)")
        arrays[name] = np.frombuffer(mapped, dtype, count=a["count"], offset=a["offset"])
    return header, arrays
