"""The members of a tar shard as arrays, what the dataset index is built from: no Python
object per member.

:func:`scan_arrays` gives what :func:`turbofeed.io.local.index.scan_members` gives (the
last copy of each name, and the damage), as a :class:`MemberArrays`. A plain, whole
shard is walked by the native extension (``tar_walk``: the GIL released, so the index's
threads read shards in parallel) or, without it, by
:func:`~turbofeed.io.local.tarscan.fast_members`; any other file by ``tarfile``
(:func:`~turbofeed.io.local.index.tarfile_members`), which decides what its damage is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ...decode import native
from .index import TarDamage, last_copies, tarfile_members
from .tarscan import fast_members


@dataclass
class Split:
    """Every member's name split as :func:`~turbofeed.io.table.split_key` splits it: the
    key up to the first dot after the last slash, the extension after it (as written:
    not lower-cased). ``/`` and ``.`` are ASCII, so the raw bytes split where the
    decoded names do.

    Attributes:
        key_id: per member, its key's number (keys numbered in order of first appearance).
        key_first: per key, its first member.
        key_len: per member, its key's length in bytes.
        raw_id: per member, its extension's position in ``raw``.
        raw: the distinct extensions, raw bytes (``b""``: none).
        dotted: per member, whether its name has a dot after its last slash (``a`` and
            ``a.`` have the same key and extension, not the same name).
    """

    key_id: np.ndarray
    key_first: np.ndarray
    key_len: np.ndarray
    raw_id: np.ndarray
    raw: list[bytes]
    dotted: np.ndarray


@dataclass
class MemberArrays:
    """Members in storage order: member ``i`` is named ``names[start[i]:name_end[i]]``
    (raw bytes, as the tar headers hold them; ``start[i]`` is ``name_end[i - 1]``, or 0),
    its payload at ``offset[i]``, ``size[i]`` bytes (int64 arrays)."""

    names: bytes
    name_end: np.ndarray
    offset: np.ndarray
    size: np.ndarray

    def __len__(self) -> int:
        return len(self.name_end)

    @property
    def name_start(self) -> np.ndarray:
        return np.concatenate([[0], self.name_end[:-1]]).astype(np.int64) if len(self) else np.zeros(0, np.int64)

    def name_list(self) -> list[bytes]:
        """Every member's raw name."""
        blob = self.names
        return [blob[a:b] for a, b in zip(self.name_start.tolist(), self.name_end.tolist())]

    def as_tuples(self) -> list[tuple[str, int, int]]:
        """``(name, offset, size)`` per member, names decoded as ``tarfile`` and
        :func:`~turbofeed.io.local.tarscan.fast_members` decode them."""
        names = [n.decode("utf-8", "surrogateescape") for n in self.name_list()]
        return list(zip(names, self.offset.tolist(), self.size.tolist()))

    @classmethod
    def of(cls, members: list[tuple[str, int, int]]) -> MemberArrays:
        """The arrays of ``(name, offset, size)`` tuples (names encoded back to the bytes
        they were decoded from)."""
        raw = [name.encode("utf-8", "surrogateescape") for name, _, _ in members]
        ends = np.cumsum(np.fromiter(map(len, raw), np.int64, count=len(raw)))
        return cls(b"".join(raw), ends.astype(np.int64), np.array([m[1] for m in members], np.int64),
                   np.array([m[2] for m in members], np.int64))

    @functools.cached_property
    def split(self) -> Split:
        """Each name's key and extension (:class:`Split`), on arrays."""
        a = np.frombuffer(self.names, np.uint8)
        start, end = self.name_start, np.asarray(self.name_end, np.int64)
        key_end = _key_ends(a, start, end)
        dotted = key_end < end
        key_len = key_end - start
        key_id, key_first = numbered_slices(self.names, a, start, key_len)
        ext_start, ext_len = key_end + 1, np.where(dotted, end - key_end - 1, 0)
        raw_id, raw_first = numbered_slices(self.names, a, ext_start, ext_len)
        raw = [self.names[s:s + n] for s, n in zip(ext_start[raw_first].tolist(), ext_len[raw_first].tolist())]
        return Split(key_id, key_first, key_len, raw_id, raw, dotted)

    def key_blob(self, members: np.ndarray) -> bytes:
        """The keys of ``members``, one after another."""
        lengths = self.split.key_len[members]
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(ends) else 0
        at = np.repeat(self.name_start[members] - (ends - lengths), lengths) + np.arange(total)
        return np.frombuffer(self.names, np.uint8)[at].tobytes()

    def unique_names(self) -> bool:
        """Whether no two members have the same name."""
        s = self.split
        name_id = (s.key_id * max(1, len(s.raw)) + s.raw_id) * 2 + s.dotted
        return len(np.unique(name_id)) == len(self)


def numbered(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` numbered in order of first appearance (int64), and where each number
    first appears."""
    distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(distinct), np.int64)
    rank[order] = np.arange(len(distinct))
    return rank[inverse.reshape(-1)], first[order].astype(np.int64)


def _key_ends(a: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per name ``a[start[i]:end[i]]``, where its key ends: its first ``.`` after its
    last ``/``, or its end."""
    slashes, dots = np.flatnonzero(a == ord("/")), np.flatnonzero(a == ord("."))
    if len(slashes):
        k = np.searchsorted(slashes, end) - 1  # the last slash before the name's end...
        search = np.maximum(start, np.where(k >= 0, slashes[np.maximum(k, 0)], -1) + 1)  # ...if in the name
    else:
        search = start
    if not len(dots):
        return end.copy()
    j = np.searchsorted(dots, search)
    dot = np.where(j < len(dots), dots[np.minimum(j, len(dots) - 1)], end)
    return np.where(dot < end, dot, end)


_ROWS = 8192  # strings padded at once: the index matrix stays small
_WIDE = 512  # longer strings are numbered with a dict (a pax name can be of any length)


def numbered_slices(names: bytes, a: np.ndarray, start: np.ndarray,
                     length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`numbered` of the byte strings ``names[start[i]:start[i] + length[i]]``:
    compared as rows of one fixed-width array (each led by its length, so padding
    never makes two strings equal), or, for very long ones, with a dict."""
    width = int(length.max()) if len(length) else 0
    if width > _WIDE:
        seen: dict[bytes, int] = {}
        first: list[int] = []
        ids = []
        for i, (s, n) in enumerate(zip(start.tolist(), length.tolist())):
            k = seen.setdefault(names[s:s + n], len(seen))
            if k == len(first):
                first.append(i)
            ids.append(k)
        return np.array(ids, np.int64), np.array(first, np.int64)
    out = np.zeros((len(start), width + 4), np.uint8)
    out[:, :4] = length.astype(">u4").view(np.uint8).reshape(-1, 4)
    if len(a) and width:
        cols = np.arange(width)
        for r in range(0, len(start), _ROWS):
            s, n = start[r:r + _ROWS, None], length[r:r + _ROWS, None]
            out[r:r + _ROWS, 4:] = np.where(cols < n, a[np.minimum(s + cols, len(a) - 1)], 0)
    return numbered(out.view(f"S{width + 4}").reshape(-1))


def walk(fd: int, file_size: int, *, use_native: bool | None = None) -> MemberArrays | None:
    """The members of the plain, whole shard open as ``fd``, or None when it is not one
    (as :func:`~turbofeed.io.local.tarscan.fast_members`). ``use_native``: the
    extension's walk (None: when :func:`turbofeed.decode.native.available`).

    Raises:
        OSError: a read failed.
    """
    if use_native if use_native is not None else native.available():
        found = native.tar_walk(fd, file_size)
        return None if found is None else MemberArrays(*found)
    members = fast_members(fd, file_size)
    return None if members is None else MemberArrays.of(members)


def scan_arrays(f, file_size: int, *, use_native: bool | None = None) -> tuple[MemberArrays, TarDamage | None]:
    """:func:`~turbofeed.io.local.index.scan_members` of the open shard ``f`` as arrays:
    the members its samples are made of (the last copy of each name) and its damage."""
    if file_size == 0:
        return MemberArrays.of([]), TarDamage(0, "empty file (0 bytes)", cut=False)
    found = walk(f.fileno(), file_size, use_native=use_native)
    damage = None
    if found is None:
        members, damage = tarfile_members(f, file_size)
        found = MemberArrays.of(members)
    if found.unique_names():
        return found, damage
    kept, duplicates = last_copies(found.as_tuples())  # an appended tar: rare, so in Python
    return MemberArrays.of(kept), damage or duplicates
