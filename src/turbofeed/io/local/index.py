"""The index of a WebDataset tar shard: member offsets read once from the headers, cached.

The index is built from the 512-byte headers only (a fast walk over them,
:mod:`turbofeed.io.local.tarscan`, or ``tarfile`` for shards it does not take);
label members up to 64 KiB are read while indexing so labels cost no I/O later (larger
ones, such as per-sample annotation JSON, are read from the shard only by a loader that
parses labels). It records every sample (every key, with or without an image member:
text and embedding datasets have none) and every member of each (extension, payload
offset and size): the JSON holds ``rows`` (one ``[key, image name, image offset, image
size, label]`` per sample; image name ``""`` without an image), ``members`` (per row,
its ``[ext, offset, size]`` in storage order), ``problems`` and ``damage``. It is built in
memory each time a source is opened on its own: loaders take local shards from the
dataset index (:mod:`turbofeed.io.dsindex`, built automatically), so only compressed
shards, ``s3://`` shards and TFRecord files keep per-file index caches, through
:func:`cached_index` (each keyed by what identifies its file: identity, ETag).
Damage (a cut or corrupt shard, an empty one, duplicate member
names) is recorded in the index as a :class:`TarDamage`. Local shards
(:mod:`turbofeed.io.local.tar`) and ``s3://`` shards (:mod:`turbofeed.io.stores.shards`,
indexed from a local copy) share this code.
"""

from __future__ import annotations

import json
import logging
import os
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ...errors import DatasetError
from ..table import Label, SampleTable, group_members, parse_label, pick_image, pick_label_member, split_key
from .files import FileId
from .private import private_dirs, trusted
from .tarscan import Window, fast_members

log = logging.getLogger("turbofeed")

# 2: damaged headers detected; 3: keyed by file identity, duplicate member names
# reported, JSON without a label field is an unlabelled sample; 4: every member of a
# sample recorded ("members"); 5: samples without an image and with label members over
# 64 KiB recorded (no longer dropped)
INDEX_VERSION = 5
#: Label members up to this size are read while indexing, their text kept in the index;
#: larger ones are recorded as ``[ext, None, offset, size]`` and read when a label is asked.
INLINE_LABEL_BYTES = 64 * 1024
#: Names of tar shards, plain or compressed (zstd is recognised only to be reported).
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")


def default_cache_dir() -> str:
    """``$TURBOFEED_CACHE_DIR`` or ``~/.cache/turbofeed``."""
    return os.environ.get("TURBOFEED_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "turbofeed")


@dataclass
class TarDamage:
    """Why a shard is reported: damage at ``offset`` that cuts it short (members before
    it are indexed), or, with ``cut=False``, a shard with nothing usable (empty, not a
    tar) or one with duplicate member names."""

    offset: int
    reason: str
    cut: bool = True

    def describe(self, path: str, samples: int) -> str:
        if self.cut:
            return (f"{path}: truncated or corrupt at byte offset {self.offset}: {self.reason}; "
                    f"using the {samples} samples before it")
        return f"{path}: {self.reason}" + (f"; using its {samples} samples" if samples else "")

    def as_list(self) -> list:
        return [self.offset, self.reason, self.cut]


def report_damage(damage: TarDamage | None, path: str, samples: int, on_damage: str) -> None:
    """Say that the shard at ``path`` is damaged (``samples``: the samples indexed before
    the damage): raise under ``on_damage="raise"``, else log a warning.

    Raises:
        DatasetError: ``damage`` and ``on_damage == "raise"``.
    """
    if damage is None:
        return
    message = damage.describe(path, samples)
    if on_damage == "raise":
        raise DatasetError(message)
    log.warning("turbofeed: %s", message)


def unreadable_index(damage: TarDamage, **fields) -> dict:
    """The index of a shard not read at all (no samples), with ``damage`` saying why."""
    return {"rows": [], "members": [], "problems": [], "damage": damage.as_list(), **fields}


def _scan(f, file_size: int) -> tuple[list[tuple[str, int, int]], TarDamage | None]:
    """Read member (name, data offset, size) from the headers of the open file ``f``; stop
    at the first damage.

    The sample the damage cuts through (the cut member's, or the last one before a bad
    header) is dropped whole: it may have lost members, such as its label.
    """
    if file_size == 0:
        return [], TarDamage(0, "empty file (0 bytes)", cut=False)
    found = fast_members(f.fileno(), file_size)  # a plain, whole shard: no tarfile needed
    if found is not None:
        return found, None
    return tarfile_members(f, file_size)


def tarfile_members(f, file_size: int) -> tuple[list[tuple[str, int, int]], TarDamage | None]:
    """:func:`_scan` with ``tarfile`` alone, for a non-empty shard the fast walk does not
    take (not plain, or damaged): it decides what the damage is."""
    members: list[tuple[str, int, int]] = []
    damage, cut_name = None, None
    f.seek(0)  # tarfile reads from where the file is: offsets count from the shard's start
    try:
        tf = tarfile.open(fileobj=f, mode="r:")
    except tarfile.TarError as exc:
        return members, TarDamage(0, f"not a tar file ({exc})", cut=False)
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
    elif members and tf.offset >= file_size:
        # The file ends right after a member, without the end-of-archive blocks every tar
        # writer adds: cut short between members, or a writer that never closed the
        # archive. Which, no one can tell: report it and keep every member.
        damage = TarDamage(file_size, "no end-of-archive marker after the last member (cut short "
                           "between members, or never closed by its writer?)", cut=False)
    return members, damage


def last_copies(members: list[tuple[str, int, int]]) -> tuple[list[tuple[str, int, int]], TarDamage | None]:
    """Keep the last copy of each member name, as ``tar -x`` does (an appended tar adds a
    newer copy after the old one); say how many were superseded."""
    last = {name: i for i, (name, _, _) in enumerate(members)}
    if len(last) == len(members):
        return members, None
    dropped = [m for i, m in enumerate(members) if last[m[0]] != i]
    kept = [m for i, m in enumerate(members) if last[m[0]] == i]
    return kept, TarDamage(dropped[0][1], f"{len(dropped)} member names appear more than once "
                           f"(e.g. {dropped[0][0]!r}; an appended tar?): the last copy of each is used, "
                           "as `tar -x` would", cut=False)


def index_shard(path: str) -> dict:
    """Index ``path`` from one open descriptor, and record that file's identity: the
    index describes exactly the bytes it read, even if the path is replaced meanwhile."""
    with open(path, "rb") as f:
        identity = FileId.of(os.fstat(f.fileno()))
        members, damage = scan_members(f, identity.size)
        index = _rows(members, damage, Window(f.fileno()).pread)  # labels lie near their headers
    index.update(version=INDEX_VERSION, file=identity.as_dict())
    return index


def scan_members(f, file_size: int) -> tuple[list[tuple[str, int, int]], TarDamage | None]:
    """The members of the open shard ``f`` that its samples are made of (the last copy of
    each name) and its damage, if any (the first steps of every tar index)."""
    members, damage = _scan(f, file_size)
    members, duplicates = last_copies(members)
    return members, damage or duplicates


def sample_rows(members: list[tuple[str, int, int]],
                pread: Callable[[int, int], bytes]) -> Iterator[tuple[str, int | None, dict[str, int], list | None]]:
    """``(key, image member or None, {ext: member}, raw label)`` of every sample of
    ``members`` (as :func:`scan_members` gives them), in storage order; the raw label is
    ``[ext, text]`` of its label member (read with ``pread(size, offset)``), ``[ext,
    None, offset, size]`` for one over :data:`INLINE_LABEL_BYTES` (not read), or None."""
    for key, group in group_members([m[0] for m in members]).items():
        label_raw = None
        found = pick_label_member(group)
        if found is not None:
            ext, i = found
            _, offset, size = members[i]
            label_raw = [ext, None, offset, size] if size > INLINE_LABEL_BYTES else \
                [ext, pread(size, offset).decode("utf-8", "replace")]
        yield key, pick_image(group), group, label_raw


def no_image(group: dict[str, int]) -> str:
    """Why a sample without an image member is bad for a loader of images and labels."""
    return f"no image member (has {', '.join(sorted(group)) or 'no members'})"


def no_samples(damage: TarDamage | None, members: int, samples: int) -> TarDamage | None:
    """``damage``, or why a shard without damage has no samples (then it is reported too)."""
    if samples or damage is not None:
        return damage
    return TarDamage(0, "no members (an empty tar)", cut=False)


def _rows(members: list[tuple[str, int, int]], damage: TarDamage | None,
          pread: Callable[[int, int], bytes]) -> dict:
    """The JSON index of the members :func:`scan_members` found."""
    rows: list[list] = []
    row_members: list[list] = []
    problems: list[tuple[str, str]] = []
    for key, image, group, label_raw in sample_rows(members, pread):
        name, offset, size = ("", 0, 0) if image is None else members[image]
        rows.append([key, name, offset, size, label_raw])
        row_members.append([[ext, members[i][1], members[i][2]] for ext, i in group.items()])
    damage = no_samples(damage, len(members), len(rows))
    return {"rows": rows, "members": row_members, "problems": problems,
            "damage": None if damage is None else damage.as_list()}


def without_images(table: SampleTable, damage: TarDamage | None) -> tuple[SampleTable, TarDamage | None]:
    """For a loader of images and labels: a shard none of whose samples has an image
    member holds nothing it can use: an empty table, reported like an empty shard
    (``(table, damage)`` as they are otherwise)."""
    if damage is not None or not len(table) or len(table.bad) < len(table) or any(table.image_names):
        return table, damage
    return SampleTable(problems=table.problems), TarDamage(
        0, f"no samples ({len(table)} keys, none with an image member)", cut=False)


def _no_read(size: int, offset: int) -> bytes:
    raise ValueError(f"a label member of {size} bytes, and no way to read it here")


def load_index(path: str, cache_dir: str | None = None) -> dict:
    """The JSON-style index of the plain tar shard at ``path`` (``rows``, ``members``,
    ``problems``, ``damage``; ``file``: the identity indexed), read from its headers now.

    Kept for callers of the per-shard index, which is no longer cached: loaders map the
    dataset index (:mod:`turbofeed.io.dsindex`), which describes every shard at once.
    ``cache_dir`` is accepted and ignored.
    """
    del cache_dir
    return index_shard(path)


def cached_index(cached: str | None, key: dict, build: Callable[[], dict], what: str) -> dict:
    """The index stored at ``cached`` when its version and the ``key`` fields match (the
    shard it describes is unchanged), else ``build()``, stored there for next time (None:
    ``build()``, stored nowhere: the shard's version cannot be known again). A
    stored index that others could have written is not used (one warning says why:
    :mod:`turbofeed.io.local.private`); the cache's folders are created mode 0700."""
    if cached is None:
        return build()
    try:
        if trusted(cached, "the cached index"):
            with open(cached) as f:
                index = json.load(f)
            if index.get("version") == INDEX_VERSION and all(index.get(k) == v for k, v in key.items()):
                return index
    except (OSError, ValueError):
        pass
    index = build()
    try:  # a read-only or full cache dir only costs a rebuild next time
        private_dirs(os.path.dirname(cached))
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cached), suffix=".tmp")  # unique name
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(index, f)
            os.replace(tmp, cached)  # atomic publish: readers never see half an index
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log.debug("turbofeed: cannot cache the index of %s: %s", what, exc)
    return index


def label_of(raw: list | None, read: Callable[[int, int], bytes]) -> tuple[Label, str | None]:
    """``(label, None)`` of an index's raw label (``[ext, text]``, ``[ext, None, offset,
    size]`` read with ``read(size, offset)``, or None), or ``(None, why)`` when it cannot
    be parsed (for a loader of labels, a bad sample)."""
    if raw is None:
        return None, None
    ext, text = raw[0], raw[1]
    try:
        payload = read(raw[3], raw[2]) if text is None else text.encode()
        return parse_label(ext, payload), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"bad .{ext} label: {exc}"


def table_from_index(index: dict, *, labels: bool = True,
                     read: Callable[[int, int], bytes] | None = None) -> SampleTable:
    """The sample table of a tar index: one row per sample, with all its members (local
    and s3:// shards alike). With ``labels`` (a loader of images and labels) labels are
    parsed (those over 64 KiB read now with ``read(size, offset)``), and a sample
    without an image member or whose label cannot be parsed is in ``table.bad`` (a bad
    sample when fetched). Without ``labels`` (a loader asking for fields: a ``.txt`` is a
    caption, not a class name) no label is parsed and every sample is good as far as
    the table knows (its fields are checked when read)."""
    problems: list[tuple[str, str]] = [(p[0], p[1]) for p in index["problems"]]
    keys: list[str] = []
    names: list[str] = []
    raw_labels: list[Label] = []
    offsets, sizes, members = [], [], []
    bad: dict[int, str] = {}
    for (key, name, offset, size, label_raw), kept in zip(index["rows"], index["members"], strict=True):
        if labels:
            problem: str | None
            if not name:  # its label is not read: a bad sample's label counts for nothing
                label, problem = None, no_image({m[0]: 0 for m in kept})
            else:
                label, problem = label_of(label_raw, read or _no_read)
            if problem is not None:
                bad[len(keys)] = problem
        else:
            label = None
        keys.append(key)
        names.append(name)
        raw_labels.append(label)
        offsets.append(offset)
        sizes.append(size)
        members.append(kept)
    table = SampleTable(keys=keys, image_names=names, labels=raw_labels, problems=problems, bad=bad,
                        offsets=np.asarray(offsets, dtype=np.int64), sizes=np.asarray(sizes, dtype=np.int64))
    table.set_members(members)
    return table
