"""A dataset index opened for loading: which shards it describes, whether each is still
the version it indexed, and their sample tables as views of the mapped arrays.

A shard is taken from the index when its identity is the one recorded for its path
(local: one ``stat``, inode, size, ``mtime_ns`` and ``ctime_ns``; ``s3://``: ETag and size
from the listing the dataset already made); the others (replaced, rewritten, swapped by
``mv``, copied, added since) are opened on their own with one warning that names them and
the command that rebuilds the index. Why the ctime: a rewrite in place that keeps the
size and sets the mtime back (``os.utime``, ``touch -r``, ``rsync``) still sets it, and no
tool can set it back. Why the inode: shards swapped by ``mv`` keep their sizes and times,
not their paths' inodes. Why not the device number (recorded, not compared): network and
FUSE file systems number devices per mount, so one dataset on NFS would match on no node
but the one that indexed it; a file on another device at the same path with the same
inode, size and both nanosecond times is not a thing that happens.

The file is believed only after :func:`~.fileformat.read_index` checked its checksum and
:class:`DatasetIndex` its counts against its arrays.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...errors import DatasetError
from ..columns import JoinedColumn, LabelColumn, StrColumn
from ..local.files import FileId
from ..local.index import TarDamage, report_damage, without_images
from ..local.tar import TarSource
from ..stores.shards import S3TarSource
from ..source import Source
from ..table import SampleTable
from .fileformat import REBUILD, read_index

if TYPE_CHECKING:
    from ..registry import Opener

log = logging.getLogger("turbofeed")

_NO_ROWS: dict = {"rows": [], "members": [], "problems": [], "damage": None}


def shard_id(kind: str, path: str) -> str:
    """How the index names a shard it lists: the URL, or the absolute local path."""
    return path if kind == "s3" else os.path.normpath(os.path.abspath(path))


class DatasetIndex:
    """One dataset index file, mapped.

    Args:
        path: the local file (for an ``s3://`` index, its copy in the index cache).
        origin: where it was found (the ``s3://`` URL, or ``path``): relative shard names
            in it are relative to that folder.
        loaded: ``(header, arrays)`` of an index built in memory and written nowhere (then
            ``path`` only names it in messages); default: read from ``path``.

    Attributes:
        header: the JSON header (shards with their identity, counts, problems, damage).
        arrays: the mapped arrays (see :mod:`turbofeed.io.dsindex.fileformat`).
        sample_start: int64, shard ``k``'s rows are ``sample_start[k]:sample_start[k + 1]``.
    """

    def __init__(self, path: str, origin: str | None = None, *,
                 loaded: tuple[dict, dict[str, np.ndarray]] | None = None) -> None:
        self.path = path
        self.origin = origin or path
        #: built in memory for this process and written nowhere (``path`` only names it)
        self.in_memory = loaded is not None
        self.header, self.arrays = read_index(path) if loaded is None else loaded
        self.shards: list[dict] = self.header["shards"]
        counts = np.array([s["samples"] for s in self.shards], np.int64)
        self.sample_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        _check_counts(path, self.header, self.arrays, int(self.sample_start[-1]))
        base = self.origin[:self.origin.rfind("/") + 1] if "://" in self.origin else \
            os.path.dirname(os.path.abspath(self.origin))
        self._by_id = {_absolute(base, s["name"]): k for k, s in enumerate(self.shards)}
        self._label_names: list[str] = list(self.header["label_names"])
        self._exts = tuple(self.header["member_exts"])

    @property
    def data(self) -> str:
        """What ``turbofeed index`` was given."""
        return self.header.get("data", "DATA")

    @property
    def rebuild(self) -> str:
        """The command that writes this index again."""
        out = f" --out {shlex.quote(self.origin)}" if self.header.get("explicit_out") else ""
        return f"turbofeed index {shlex.quote(self.data)}{out}"

    def find(self, kind: str, path: str) -> int | None:
        """The position of the shard ``(kind, path)`` (as :func:`~turbofeed.io.resolve`
        gives it) in the index, or None when it lists no such shard."""
        return self._by_id.get(shard_id(kind, path))

    def covers(self, located: Sequence[tuple[str, str]]) -> int:
        """How many of the tar and ``s3://`` shards of ``located`` it lists."""
        return sum(self.find(kind, path) is not None for kind, path in located if kind in ("tar", "s3"))

    def stale(self, located: Sequence[tuple[str, str]]) -> list[int]:
        """Positions in ``located`` of the local tar shards the index does not describe as
        they are now: not listed, or listed with another file identity (one ``stat``
        each; see the module docstring)."""
        out = []
        for pos, (kind, path) in enumerate(located):
            if kind != "tar":
                continue
            k = self.find(kind, path)
            if k is None or self._stat_if_same(k, path) is None:
                out.append(pos)
        return out

    def _stat_if_same(self, k: int, path: str) -> os.stat_result | None:
        """``stat(path)`` when it is the file shard ``k`` was indexed from, else None."""
        entry = self.shards[k]
        try:
            st = os.stat(path)
        except OSError:
            return None  # opened on its own, which says what is wrong
        if (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != \
                (entry.get("ino"), entry.get("size"), entry.get("mtime_ns"), entry.get("ctime_ns")):
            return None
        return st

    def table(self, k: int, labels: bool = True) -> SampleTable:
        """Shard ``k``'s sample table, as :func:`~turbofeed.io.local.index.table_from_index`
        gives it from the per-shard index: views of the mapped arrays, no object per sample
        (with ``labels``, the samples it cannot use are in ``table.bad``)."""
        a, shard = self.arrays, self.shards[k]
        s0, s1 = int(self.sample_start[k]), int(self.sample_start[k + 1])
        keys = StrColumn(a["key_blob"], a["key_end"][s0:s1], int(a["key_end"][s0 - 1]) if s0 else 0)
        table = SampleTable(
            keys=keys, image_names=JoinedColumn(keys, a["image_suffix"][s0:s1], self.header["image_suffixes"]),
            offsets=a["offset"][s0:s1], sizes=a["size"][s0:s1],
            labels=LabelColumn(a["label_kind"][s0:s1], a["label_value"][s0:s1], self._label_names) if labels
            else LabelColumn(None, None, (), n=s1 - s0),
            problems=[(key, why) for key, why in shard["problems"]],
            member_start=a["member_start"][s0:s1 + 1], member_ext=a["member_ext"], member_exts=self._exts,
            member_offset=a["member_offset"], member_size=a["member_size"])
        table.heights, table.widths, table.scans = a["height"][s0:s1], a["width"][s0:s1], a["scan"][s0:s1]
        if labels:  # samples a loader of labels cannot use: bad samples when fetched
            table.bad = {row: why for row, why in shard["bad"]}
        return table

    def _usable(self, k: int, labels: bool) -> tuple[SampleTable, TarDamage | None]:
        """Shard ``k``'s table and damage as a per-shard source gives them (a loader of
        labels gets nothing from a shard without images: reported like an empty one)."""
        table, damage = self.table(k, labels), self.damage(k)
        return without_images(table, damage) if labels else (table, damage)

    def damage(self, k: int) -> TarDamage | None:
        found = self.shards[k]["damage"]
        return None if found is None else TarDamage(*found)

    def sources(self, located: Sequence[tuple[str, str]], opener: Opener) -> dict[int, Source]:
        """The sources of ``located`` (positions -> source) that the index describes as they
        are now; the rest are the caller's to open, and those the index should have
        described (changed or new shards) are named in one warning.

        Raises:
            DatasetError: a damaged shard under ``on_damage="raise"``.
        """
        out: dict[int, Source] = {}
        stale: list[str] = []
        for pos, (kind, path) in enumerate(located):
            if kind not in ("tar", "s3"):
                continue
            k = self.find(kind, path)
            entry = None if k is None else self.shards[k]
            if entry is not None and entry.get("per_shard"):
                continue  # compressed, or an empty object: opened on its own, as always
            source = None if k is None else self._source(k, kind, path, opener)
            if source is None:
                stale.append(path)
            else:
                out[pos] = source
        if stale:
            shown = ", ".join(os.path.basename(p.rstrip("/")) for p in stale[:3])
            more = f" and {len(stale) - 3} more" if len(stale) > 3 else ""
            log.warning("turbofeed: %d shard(s) changed or added since the dataset index %s was built "
                        "(%s%s): indexing them one by one; rebuild the index with `%s`",
                        len(stale), self.origin, shown, more, self.rebuild)
        return out

    def _source(self, k: int, kind: str, path: str, opener: Opener) -> Source | None:
        entry = self.shards[k]
        if kind == "tar":
            st = self._stat_if_same(k, path)
            if st is None:
                return None
            table, damage = self._usable(k, opener.labels)
            return TarSource.indexed(path, FileId.of(st), table, damage,
                                     samples=len(table), on_damage=opener.on_damage)
        shards = opener.shards
        assert shards is not None, "an Opener makes the shards of every s3 path it is given"
        info = shards.infos[path]
        if (info.version, info.size) != (entry.get("etag"), entry.get("size")):
            return None
        table, damage = self._usable(k, opener.labels)
        report_damage(damage, path, len(table), opener.on_damage)
        source = S3TarSource(info, _NO_ROWS, shards, labels=opener.labels)
        source.table = table
        source.damage = damage
        return shards.adopt(source)

    def shard_bytes(self) -> np.ndarray:
        """int64 size of each shard the index lists, in its order (no shard is read)."""
        return np.array([s["size"] for s in self.shards], np.int64)

    def __repr__(self) -> str:
        return f"DatasetIndex({self.origin!r}, shards={len(self.shards)}, samples={int(self.sample_start[-1])})"


def _check_counts(path: str, header: dict, a: dict[str, np.ndarray], samples: int) -> None:
    """Refuse an index whose counts disagree with its arrays (a checksum passes a file
    written wrong): each shard's samples and members must add up to the arrays' lengths,
    so no shard's rows can take another's. O(shards), no array is read but two ends.

    Raises:
        DatasetError: naming the file and the count that disagrees.
    """
    per_sample = ("key_end", "image_suffix", "offset", "size", "label_kind", "label_value", "height", "width",
                  "scan")
    members = sum(int(s["members"]) for s in header["shards"])
    wrong = [f"{name} holds {len(a[name])}" for name in per_sample if len(a[name]) != samples]
    if header.get("samples") != samples:
        wrong.append(f"the header says {header.get('samples')}")
    if len(a["member_start"]) != samples + 1 or (samples and int(a["member_start"][-1]) != members):
        wrong.append("member_start disagrees")
    if any(len(a[name]) != members for name in ("member_ext", "member_offset", "member_size")):
        wrong.append(f"the member arrays do not hold the shards' {members} members")
    if samples and int(a["key_end"][-1]) > len(a["key_blob"]):
        wrong.append("the keys run past their bytes")
    if wrong:
        raise DatasetError(f"{path}: damaged dataset index: its shards hold {samples} samples but "
                           f"{'; '.join(wrong)}{REBUILD}")


def _absolute(base: str, name: str) -> str:
    if "://" in name:
        return name
    if "://" in base:
        return base + name
    return os.path.normpath(os.path.join(base, name))
