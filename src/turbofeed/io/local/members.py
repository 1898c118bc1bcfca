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

from dataclasses import dataclass

import numpy as np

from ...decode import native
from .index import TarDamage, last_copies, tarfile_members
from .tarscan import fast_members


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
        return np.concatenate([[0], self.name_end[:-1]]).astype(np.int64)

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
    names = found.name_list()
    if len(set(names)) == len(names):
        return found, damage
    kept, duplicates = last_copies(found.as_tuples())  # an appended tar: rare, so in Python
    return MemberArrays.of(kept), damage or duplicates
