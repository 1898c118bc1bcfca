"""What a dataset holds, as one digest a resume state carries (:class:`turbofeed.plan.resume.DataPrint`).

Per shard, a SHA-256 digest over its name (the last path component: the same data copied
to another directory, machine or bucket gives the same digest; no inode, no mtime), and
the table the index gave: sample keys, image sizes, each member's extension and size,
and the sample labels. Everything is hashed as numpy buffers, in a form that does not
depend on how the table was read (a shard's own index or the dataset index, whose arrays
are narrower views of one memory map), so the digest is the same either way.

Cost: one pass over the index arrays, no read of shard bytes; about 60 ms per million
samples (measured in the commit that added it, keys as a list).
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Sequence

import numpy as np

from ..plan.resume import DataPrint
from .columns import StrColumn
from .source import Source


def encoded_strings(strings: Sequence[str]) -> tuple[np.ndarray, bytes | memoryview]:
    """``(lengths, bytes)``: each string's UTF-8 length (int64, undecodable tar names kept
    as their bytes) and all of them end to end, without a Python call per string for a
    :class:`~turbofeed.io.columns.StrColumn`, and two C-level calls for a list."""
    if isinstance(strings, StrColumn):
        return strings.encoded()
    if not len(strings):
        return np.zeros(0, np.int64), b""
    # NUL cannot occur in a tar member name or a path: it separates the strings
    joined = np.frombuffer("\0".join(strings).encode("utf-8", "surrogateescape"), np.uint8)
    cuts = np.flatnonzero(joined == 0)
    lengths = np.diff(cuts, prepend=-1, append=len(joined)) - 1
    return lengths.astype(np.int64), joined[joined != 0].tobytes()


def shard_name(path: str) -> str:
    """The name a shard is known by wherever it is copied: its last path component."""
    return os.path.basename(os.path.normpath(path))


def _source_digest(source: Source, labels: np.ndarray) -> bytes:
    """16 bytes over one source's name and table (see the module docstring)."""
    table = source.table
    h = hashlib.sha256()  # SHA-NI: about twice BLAKE2b's speed here
    h.update(shard_name(source.path).encode("utf-8", "surrogateescape") + b"\0")
    lengths, blob = encoded_strings(table.keys)
    h.update(np.int64(len(lengths)).tobytes())
    h.update(lengths.astype("<u4").data)
    h.update(blob)
    if table.has_members:  # every member: its sample, extension and size (the image's among them)
        first, last = int(table.member_start[0]), int(table.member_start[-1])
        h.update(np.diff(np.asarray(table.member_start, dtype=np.int64)).astype("<u4").data)
        codes = np.array([zlib.crc32(e.encode()) for e in table.member_exts], dtype="<u4")
        h.update(codes[np.asarray(table.member_ext[first:last], dtype=np.intp)].data)
        h.update(np.asarray(table.member_size[first:last]).astype("<i8").data)
    else:
        h.update(np.asarray(table.sizes).astype("<i8").data)
    h.update(np.ascontiguousarray(labels, dtype="<i8").data)
    return h.digest()[:16]


def data_print(sources: Sequence[Source], starts: np.ndarray, labels: np.ndarray) -> DataPrint:
    """The :class:`DataPrint` of a dataset: ``sources`` in order, ``starts`` (``[K + 1]``,
    the first global id of each) and ``labels`` (the global label ids)."""
    digests = [_source_digest(s, labels[int(starts[k]):int(starts[k + 1])]) for k, s in enumerate(sources)]
    bounds = DataPrint.part_bounds(len(sources))
    parts = tuple(hashlib.sha256(b"".join(digests[a:b])).hexdigest()[:8] for a, b in zip(bounds, bounds[1:]))
    whole = hashlib.sha256(b"".join(digests)).hexdigest()[:16]
    return DataPrint(whole, int(starts[-1]), tuple(shard_name(s.path) for s in sources), parts)
