"""One shard's part of the dataset index (what its per-shard index holds, as arrays), and
the whole index's arrays joined from the parts.

A part is built from the same steps as a per-shard index (:mod:`turbofeed.io.local.index`:
the header walk, last copy of each name, one sample per key, the image and label picked
alike, labels parsed alike), so a table read back from the dataset index equals the one
the per-shard path gives.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..columns import BAD, INT, NAME, NONE
from ...errors import DatasetError
from ..local.compressed import codec_of
from ..local.files import FileId
from ..local.index import TarDamage, label_of, no_image, no_samples, sample_rows, scan_members
from ..local.tarscan import Window
from ...decode.probe import probe_size


def _none() -> np.ndarray:
    return np.zeros(0, np.uint8)


@dataclass
class ShardPart:
    """One shard's samples as arrays in their narrowest dtypes (no Python object per
    sample while the other shards are built). Ids (``suffix``, ``member_ext``, name
    labels) index this part's own tables (``suffixes``, ``exts``, ``names``) until
    :func:`join` renumbers them.

    Attributes:
        entry: the shard's header entry (identity, counts, problems, damage, and ``bad``:
            ``[row, why]`` of the samples a loader of labels cannot use: no image
            member, or a label that cannot be parsed).
    """

    entry: dict
    key_blob: bytes = b""
    key_len: np.ndarray = field(default_factory=_none)
    suffix: np.ndarray = field(default_factory=_none)
    suffixes: dict[str, int] = field(default_factory=dict)
    offset: np.ndarray = field(default_factory=_none)
    size: np.ndarray = field(default_factory=_none)
    kind: np.ndarray = field(default_factory=_none)
    value: np.ndarray = field(default_factory=_none)
    names: dict[str, int] = field(default_factory=dict)
    member_count: np.ndarray = field(default_factory=_none)
    member_ext: np.ndarray = field(default_factory=_none)
    exts: dict[str, int] = field(default_factory=dict)
    member_offset: np.ndarray = field(default_factory=_none)
    member_size: np.ndarray = field(default_factory=_none)
    height: np.ndarray = field(default_factory=_none)
    width: np.ndarray = field(default_factory=_none)


def local_part(path: str) -> ShardPart:
    """The part of the tar shard at ``path``, with the identity of the file it read
    (:class:`~turbofeed.io.local.files.FileId`: ``dev``, ``ino``, ``size``, ``mtime_ns``,
    ``ctime_ns``; a change while it is read shows as a later ctime); a compressed one
    (told by its first bytes, as the per-shard path tells) without its samples. One open.

    Raises:
        OSError: it cannot be read.
    """
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        try:
            compressed = codec_of(os.pread(f.fileno(), 6, 0), path) is not None
        except DatasetError:  # zstd: the per-shard path reports it
            compressed = True
        if compressed:
            return unindexed_part(**FileId.of(st).as_dict())
        members, damage = scan_members(f, st.st_size)
        part = shard_part(members, damage, Window(f.fileno()).pread, Window(f.fileno()).pread)
    part.entry.update(FileId.of(st).as_dict())
    return part


def shard_part(members: list[tuple[str, int, int]], damage: TarDamage | None,
               pread: Callable[[int, int], bytes], heads: Callable[[int, int], bytes] | None = None) -> ShardPart:
    """The part of a shard whose members :func:`scan_members` found (labels read with
    ``pread(size, offset)``, those over 64 KiB too: the index holds parsed labels; each
    image's first bytes, for its size, with ``heads`` (default ``pread``): a reader of its
    own, so the labels' and the images' reads, each in file order, do not evict each
    other's window)."""
    problems: list[tuple[str, str]] = []
    bad: list[list] = []
    keys: list[bytes] = []
    rows: dict[str, list[int]] = {name: [] for name in ("suffix", "offset", "size", "kind", "value", "member_count",
                                                        "height", "width")}
    cols: dict[str, list[int]] = {name: [] for name in ("member_ext", "member_offset", "member_size")}
    suffix, offset, size, kinds, values, counts, heights, widths = rows.values()
    m_ext, m_offset, m_size = cols.values()
    suffixes: dict[str, int] = {}
    names: dict[str, int] = {}
    exts: dict[str, int] = {}
    for key, image, group, label_raw in sample_rows(members, pread):
        name, at, nbytes = ("", 0, 0) if image is None else members[image]
        keys.append(key.encode("utf-8", "surrogateescape"))
        suffix.append(suffixes.setdefault(name[len(key) + 1:], len(suffixes)))  # "": no image
        offset.append(at)
        size.append(nbytes)
        # the image's size from its header (aspect-ratio buckets): its first bytes only
        h, w = (0, 0) if image is None else probe_size(lambda n: (heads or pread)(n, at), nbytes)
        heights.append(h)
        widths.append(w)
        kind, value = NONE, 0
        problem: str | None
        if image is None:  # its label is not read: a bad sample's label counts for nothing
            kind, problem = BAD, no_image(group)
        else:
            label, problem = label_of(label_raw, pread)
            if problem is not None:
                kind = BAD
            elif isinstance(label, str):
                kind, value = NAME, names.setdefault(label, len(names))
            elif label is not None:
                kind, value = INT, label
        if problem is not None:
            bad.append([len(keys) - 1, problem])
        kinds.append(kind)
        values.append(value)
        counts.append(len(group))
        for ext, i in group.items():
            m_ext.append(exts.setdefault(ext, len(exts)))
            m_offset.append(members[i][1])
            m_size.append(members[i][2])
    damage = no_samples(damage, len(members), len(keys))
    entry = {"samples": len(keys), "members": len(m_ext), "problems": problems,
             "damage": None if damage is None else damage.as_list(), "bad": bad}
    arrays = {name: narrow(np.array(values, np.int64)) for name, values in {**rows, **cols}.items()}
    return ShardPart(entry, b"".join(keys), np.fromiter(map(len, keys), np.int64, count=len(keys)),
                     suffixes=suffixes, names=names, exts=exts, **arrays)


def unindexed_part(**identity) -> ShardPart:
    """A shard the dataset index lists without its samples (compressed, or an empty
    object): loaders open it on its own, as without the index."""
    return ShardPart(entry={"samples": 0, "members": 0, "problems": [], "damage": None, "bad": [],
                            "per_shard": True, **identity})


def indexed_part(header: dict, arrays: dict[str, np.ndarray], sample_start: np.ndarray, k: int) -> ShardPart:
    """Shard ``k``'s part as an index (``header``, ``arrays``, ``sample_start`` as
    :class:`~turbofeed.io.dsindex.load.DatasetIndex` holds them) recorded it: how a new
    version of the index keeps the shards that did not change without reading them. Its
    ids index the whole index's tables, which :func:`join` renumbers alike."""
    entry = {key: value for key, value in header["shards"][k].items() if key != "name"}
    s0, s1 = int(sample_start[k]), int(sample_start[k + 1])
    ends = np.asarray(arrays["key_end"][s0:s1], np.int64)
    first = int(arrays["key_end"][s0 - 1]) if s0 else 0
    starts = np.asarray(arrays["member_start"][s0:s1 + 1], np.int64)
    m0, m1 = (int(starts[0]), int(starts[-1])) if len(starts) else (0, 0)

    def table(names: list[str]) -> dict[str, int]:
        return {name: i for i, name in enumerate(names)}
    # class names: only those this shard uses, renumbered densely (the joined index's
    # names are the ones its shards hold, as when every shard is read)
    kind, value = np.array(arrays["label_kind"][s0:s1]), np.array(arrays["label_value"][s0:s1], np.int64)
    named = kind == NAME
    used = np.unique(value[named])
    value[named] = np.searchsorted(used, value[named])
    names = {header["label_names"][int(u)]: i for i, u in enumerate(used)}
    return ShardPart(
        entry, bytes(arrays["key_blob"][first:int(ends[-1]) if len(ends) else first]),
        np.diff(np.concatenate([[first], ends])), suffix=np.array(arrays["image_suffix"][s0:s1]),
        suffixes=table(header["image_suffixes"]), offset=np.array(arrays["offset"][s0:s1]),
        size=np.array(arrays["size"][s0:s1]), kind=kind, value=value, names=names,
        member_count=np.diff(starts), member_ext=np.array(arrays["member_ext"][m0:m1]),
        exts=table(header["member_exts"]), member_offset=np.array(arrays["member_offset"][m0:m1]),
        member_size=np.array(arrays["member_size"][m0:m1]), height=np.array(arrays["height"][s0:s1]),
        width=np.array(arrays["width"][s0:s1]))


def narrow(values: np.ndarray, at_least: type = np.uint8) -> np.ndarray:
    """``values`` in the smallest dtype that holds them, never smaller than ``at_least``
    (unsigned when none is negative)."""
    if len(values) == 0:
        return values.astype(at_least)
    lo, hi = int(values.min()), int(values.max())
    dtype = np.result_type(np.min_scalar_type(lo), np.min_scalar_type(hi), at_least)
    return values.astype(dtype)


def _renumber(parts: Sequence[ShardPart], ids: str, table: str, order: list[str],
              only: Callable[[ShardPart], np.ndarray] | None = None) -> np.ndarray:
    """Every part's ``ids`` (positions in its own ``table``) as positions in ``order``;
    with ``only``, just the rows it selects (the others are kept as they are)."""
    where = {name: i for i, name in enumerate(order)}
    out = []
    for p in parts:
        local = np.asarray(getattr(p, ids), np.int64)
        lut = np.array([where[name] for name in getattr(p, table)] or [0], np.int64)
        rows = np.ones(len(local), bool) if only is None else only(p)
        local[rows] = lut[local[rows]]
        out.append(local)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def join(parts: Sequence[ShardPart]) -> tuple[dict, dict[str, np.ndarray]]:
    """The header fields (tables of suffixes, extensions, class names) and arrays of the
    whole index, shards in order, each array in its narrowest dtype (offsets and
    positions at least uint32)."""
    suffixes = list(dict.fromkeys(s for p in parts for s in p.suffixes))
    exts = list(dict.fromkeys(e for p in parts for e in p.exts))
    names = sorted({n for p in parts for n in p.names})

    def cat(name: str) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(p, name), np.int64) for p in parts]) if parts \
            else np.zeros(0, np.int64)

    kind = cat("kind")
    value = _renumber(parts, "value", "names", names, only=lambda p: np.asarray(p.kind) == NAME)
    key_len = cat("key_len")
    arrays = {
        "key_blob": np.frombuffer(b"".join(p.key_blob for p in parts), np.uint8),
        "key_end": narrow(np.cumsum(key_len), np.uint32),
        "image_suffix": narrow(_renumber(parts, "suffix", "suffixes", suffixes)),
        "offset": narrow(cat("offset"), np.uint32),
        "size": narrow(cat("size")),
        "label_kind": kind.astype(np.uint8),
        "label_value": narrow(value),
        "member_start": narrow(np.concatenate([[0], np.cumsum(cat("member_count"))]), np.uint32),
        "member_ext": narrow(_renumber(parts, "member_ext", "exts", exts)),
        "member_offset": narrow(cat("member_offset"), np.uint32),
        "member_size": narrow(cat("member_size")),
        "height": narrow(cat("height"), np.uint16),  # 0: no size (no image, no readable header)
        "width": narrow(cat("width"), np.uint16),
    }
    return {"image_suffixes": suffixes, "member_exts": exts, "label_names": names}, arrays
