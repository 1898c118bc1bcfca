"""WebDataset tar shards: an index of member offsets built once, then one pread per sample.

The index is built from the 512-byte headers only (``tarfile`` seeks over payloads);
small label members are read while indexing so labels cost no I/O later. It is cached
as JSON under the cache directory, keyed by the shard's absolute path and checked
against its size and modification time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import DatasetError
from .files import FILES, views_enabled
from .table import (Label, SampleTable, group_members, parse_label, pick_image, pick_label_member,
                    split_key)

log = logging.getLogger("turbofeed")

INDEX_VERSION = 2  # 2: damaged headers detected (indexes of 1 may have missed them)
_MAX_LABEL_BYTES = 64 * 1024


def default_cache_dir() -> str:
    """``$TURBOFEED_CACHE_DIR`` or ``~/.cache/turbofeed``."""
    return os.environ.get("TURBOFEED_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "turbofeed")


@dataclass
class TarDamage:
    """Where a shard stops being readable; members before ``offset`` are indexed."""

    offset: int
    reason: str




def _scan(path: str) -> tuple[list[tuple[str, int, int]], TarDamage | None]:
    """Read member (name, data offset, size) from the headers; stop at the first damage.

    The sample the damage cuts through (the cut member's, or the last one before a bad
    header) is dropped whole: it may have lost members, such as its label.
    """
    members: list[tuple[str, int, int]] = []
    damage, cut_name = None, None
    file_size = os.path.getsize(path)
    with open(path, "rb") as f:
        magic = f.read(2)
        if magic == b"\x1f\x8b":
            raise DatasetError(f"{path}: gzip-compressed tar; turbofeed reads plain tar shards "
                               "(decompress it once with `gunzip`)")
        f.seek(0)
        try:
            tf = tarfile.open(fileobj=f, mode="r:")
        except tarfile.TarError as exc:
            if file_size == 0:
                return members, None
            raise DatasetError(f"{path}: not a tar file ({exc})") from exc
        try:
            for info in tf:
                if not info.isfile():
                    continue
                end = info.offset_data + info.size
                if end > file_size:
                    damage = TarDamage(info.offset, f"member {info.name!r} needs bytes up to "
                                       f"{end} but the file ends at {file_size}")
                    cut_name = info.name
                    break
                members.append((info.name, info.offset_data, info.size))
        except tarfile.TarError as exc:
            damage = TarDamage(tf.offset, f"unreadable tar header ({exc})")
        if damage is None and tf.offset < file_size:
            # tarfile stops quietly at a corrupt or cut header; a real end is a zero block
            f.seek(tf.offset)
            if f.read(512).strip(b"\0"):
                damage = TarDamage(tf.offset, "unreadable tar header (bad checksum or cut short)")
    if damage is not None and members:
        cut_key = split_key(cut_name or members[-1][0])[0]
        while members and split_key(members[-1][0])[0] == cut_key:
            members.pop()
    return members, damage


def _build_index(path: str) -> dict:
    members, damage = _scan(path)
    names = [m[0] for m in members]
    rows, problems = [], []
    for key, group in group_members(names).items():
        image = pick_image(group)
        if image is None:
            problems.append((key, f"no image member (has {sorted(group)})"))
            continue
        label_raw = None
        found = pick_label_member(group)
        if found is not None:
            ext, i = found
            _, offset, size = members[i]
            if size > _MAX_LABEL_BYTES:
                problems.append((key, f"label member .{ext} is {size} bytes"))
                continue
            label_raw = [ext, FILES.pread(path, size, offset).decode("utf-8", "replace")]
        name, offset, size = members[image]
        rows.append([key, name, offset, size, label_raw])
    stat = os.stat(path)
    return {
        "version": INDEX_VERSION, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
        "rows": rows, "problems": problems,
        "damage": None if damage is None else [damage.offset, damage.reason],
    }


def _cache_path(cache_dir: str, path: str) -> str:
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:20]
    return os.path.join(cache_dir, "tar-index", f"{digest}.json")


def load_index(path: str, cache_dir: str | None = None) -> dict:
    """Return the shard's index, from the cache when it matches the file, else built and cached."""
    cache_dir = cache_dir or default_cache_dir()
    stat = os.stat(path)
    return cached_index(_cache_path(cache_dir, path), {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns},
                        lambda: _build_index(path), path)


def cached_index(cached: str, key: dict, build: Callable[[], dict], what: str) -> dict:
    """The index stored at ``cached`` when its version and the ``key`` fields match (the
    shard it describes is unchanged), else ``build()``, stored there for next time."""
    try:
        with open(cached) as f:
            index = json.load(f)
        if index.get("version") == INDEX_VERSION and all(index.get(k) == v for k, v in key.items()):
            return index
    except (OSError, ValueError):
        pass
    index = build()
    try:  # a read-only or full cache dir only costs a rebuild next time
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        tmp = f"{cached}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            json.dump(index, f)
        os.replace(tmp, cached)  # atomic publish: readers never see half an index
    except OSError as exc:
        log.debug("turbofeed: cannot cache the index of %s: %s", what, exc)
    return index


def _label_of(raw: list | None) -> tuple[Label, str | None]:
    if raw is None:
        return None, None
    ext, text = raw
    try:
        return parse_label(ext, text.encode()), None
    except ValueError as exc:
        return None, f"bad .{ext} label: {exc}"


def table_from_index(index: dict) -> SampleTable:
    """The sample table of a tar index: one row per sample with a usable label; samples
    whose label cannot be parsed become problems (local and s3:// shards alike)."""
    table = SampleTable(problems=[tuple(p) for p in index["problems"]])
    offsets, sizes = [], []
    for key, name, offset, size, label_raw in index["rows"]:
        label, problem = _label_of(label_raw)
        if problem is not None:
            table.problems.append((key, problem))
            continue
        table.keys.append(key)
        table.image_names.append(name)
        table.labels.append(label)
        offsets.append(offset)
        sizes.append(size)
    table.offsets = np.asarray(offsets, dtype=np.int64)
    table.sizes = np.asarray(sizes, dtype=np.int64)
    return table


class TarSource:
    """One WebDataset tar shard.

    Args:
        path: the shard.
        on_damage: ``"raise"`` to fail on a truncated or corrupt shard with the file
            and byte offset; ``"skip"`` to keep the samples before the damage and log
            a warning.
        cache_dir: where the index is cached (default :func:`default_cache_dir`).
    """

    def __init__(self, path: str, *, on_damage: str = "skip", cache_dir: str | None = None) -> None:
        self.path = path
        index = load_index(path, cache_dir)
        self.damage = None if index["damage"] is None else TarDamage(*index["damage"])
        if self.damage is not None:
            message = f"{path}: truncated or corrupt at byte offset {self.damage.offset}: " \
                      f"{self.damage.reason}"
            if on_damage == "raise":
                raise DatasetError(message)
            log.warning("turbofeed: %s; using the %d samples before it", message,
                        len(index["rows"]))
        self.table = table_from_index(index)
        self._views = views_enabled()  # read once: os.environ costs 0.5 us per sample

    def read(self, i: int) -> bytes:
        """Encoded bytes of sample ``i`` with one positional read (releases the GIL)."""
        size = int(self.table.sizes[i])
        data = FILES.pread(self.path, size, int(self.table.offsets[i]))
        if len(data) != size:
            raise OSError(f"short read: {len(data)} of {size} bytes at offset "
                          f"{int(self.table.offsets[i])} (file changed since indexing?)")
        return data

    def view(self, i: int) -> bytes | memoryview:
        """Sample ``i`` without a copy: a view of the mapped shard (``read`` when
        ``TURBOFEED_MMAP=0``). Valid as long as it is referenced."""
        if not self._views:
            return self.read(i)
        return FILES.view(self.path, int(self.table.sizes[i]), int(self.table.offsets[i]))

    def close(self) -> None:
        FILES.close(self.path)

    def __repr__(self) -> str:
        return f"TarSource({self.path!r}, samples={len(self.table)})"
