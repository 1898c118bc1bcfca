"""One shard's part of the dataset index (what its per-shard index holds, as arrays), and
the whole index's arrays joined from the parts.

A part follows the same rules as a per-shard index (:mod:`turbofeed.io.local.index`:
the header walk, last copy of each name, one sample per key, the image and label picked
alike, labels parsed alike), so a table read back from the dataset index equals the one
the per-shard path gives; it applies them to arrays (:mod:`turbofeed.io.local.members`,
:mod:`turbofeed.io.dsindex.grouping`), with no Python loop per member, and reads the
header walk, the labels and the JPEG headers in the native extension when it is built
(each one call without the GIL: the index's threads read shards in parallel).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..columns import BAD, INT, NAME, NONE
from ...errors import DatasetError
from ..local.compressed import codec_of
from ..local.files import FileId
from ..local.index import INLINE_LABEL_BYTES, TarDamage, label_of, no_image, no_samples
from ..local.members import MemberArrays, numbered, numbered_slices, scan_arrays
from ..local.tarscan import Window
from ...decode import native
from ...decode.probe import probe_size
from .grouping import Samples, group


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
    scan: np.ndarray = field(default_factory=_none)


def local_part(path: str, *, use_native: bool | None = None) -> ShardPart:
    """The part of the tar shard at ``path``, with the identity of the file it read
    (:class:`~turbofeed.io.local.files.FileId`: ``dev``, ``ino``, ``size``, ``mtime_ns``,
    ``ctime_ns``; a change while it is read shows as a later ctime); a compressed one
    (told by its first bytes, as the per-shard path tells) without its samples. One open.
    ``use_native``: read it with the native extension (None: when it is available).

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
        members, damage = scan_arrays(f, st.st_size, use_native=use_native)
        part = shard_part(members, damage, f.fileno(), use_native=use_native)
    part.entry.update(FileId.of(st).as_dict())
    return part


def shard_part(members: MemberArrays, damage: TarDamage | None, fd: int, *,
               use_native: bool | None = None) -> ShardPart:
    """The part of a shard whose members :func:`~turbofeed.io.local.members.scan_arrays`
    found in the file open as ``fd``: labels read (those over 64 KiB too: the index
    holds parsed labels), each image's size from its first bytes. What the per-shard
    path (:func:`~turbofeed.io.local.index.sample_rows`, ``label_of``,
    :func:`~turbofeed.decode.probe.probe_size`) gives, sample for sample, on arrays
    (:mod:`turbofeed.io.dsindex.grouping`); with the native extension (``use_native``,
    None: when available), the labels and the JPEG headers are read by one call each
    without the GIL."""
    on = native.available() if use_native is None else use_native
    s = group(members)
    n = len(s.key_len)
    has_image = s.image >= 0
    image = np.where(has_image, s.image, 0)
    offset = np.where(has_image, members.offset[image], 0)
    size = np.where(has_image, members.size[image], 0)
    suffix, first = _in_order(np.where(has_image, s.raw_id[image], -1))  # -1: "", no image
    suffixes = {("" if u < 0 else s.raw[u]): i for i, u in enumerate(first.tolist())}
    kind, value, names, problems = _labels(members, s, has_image, fd, on)
    member_start = np.concatenate([[0], np.cumsum(s.count)]).tolist()
    for i in np.flatnonzero(~has_image).tolist():  # its label is not read: a bad sample's label counts for nothing
        kind[i] = BAD
        rows = s.rows[member_start[i]:member_start[i + 1]]
        problems[i] = no_image({s.lower[e]: 0 for e in s.lext[rows].tolist()})
    height, width = _sizes(fd, offset, size, has_image, on)
    scan = _scans(fd, offset, size, height > 0)
    damage = no_samples(damage, len(members), n)
    entry = {"samples": n, "members": len(s.rows), "problems": [],
             "damage": None if damage is None else damage.as_list(),
             "bad": [[i, problems[i]] for i in sorted(problems)]}
    arrays = {"suffix": suffix, "offset": offset, "size": size, "kind": kind, "value": value,
              "member_count": s.count, "height": height, "width": width, "scan": scan, "member_ext": s.ext,
              "member_offset": members.offset[s.rows], "member_size": members.size[s.rows]}
    return ShardPart(entry, s.key_blob, np.asarray(s.key_len, np.int64),
                     suffixes=suffixes, names=names, exts=s.exts,
                     **{name: narrow(np.asarray(a, np.int64)) for name, a in arrays.items()})


def _in_order(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` numbered in order of first appearance, and the distinct values in that order."""
    ids, first = numbered(values)
    return ids, values[first]


def _labels(members: MemberArrays, s: Samples, has_image: np.ndarray, fd: int,
            on: bool) -> tuple[np.ndarray, np.ndarray, dict[str, int], dict[int, str]]:
    """``(kind, value, names, problems)`` of the labels of the samples with an image:
    each distinct label member parsed once (:func:`~turbofeed.io.local.index.label_of`,
    as the per-shard path parses it: text up to 64 KiB read while indexing and decoded
    with replacement, larger ones read as bytes)."""
    n = len(s.key_len)
    kind, value = np.full(n, NONE, np.int64), np.zeros(n, np.int64)
    names: dict[str, int] = {}
    problems: dict[int, str] = {}
    read = Window(fd).pread
    samples = np.flatnonzero(has_image & (s.label >= 0))
    if not len(samples):
        return kind, value, names, problems
    member = s.label[samples]
    at, nbytes, lext = members.offset[member], members.size[member], s.lext[member]
    small = nbytes <= INLINE_LABEL_BYTES
    length = nbytes[small]
    blob = native.gather(fd, at[small], length) if on else \
        b"".join(read(k, o) for o, k in zip(at[small].tolist(), length.tolist()))
    if len(blob) != int(length.sum()):  # as native.gather says: the file shrank while it was read
        raise OSError(errno.ENODATA, "the file ends before a label member it lists")
    start = np.cumsum(length) - length
    # each distinct (extension, text) parsed once: a dataset has a few classes, not a label per sample
    text, _ = numbered_slices(blob, np.frombuffer(blob, np.uint8), start, length)
    uid = np.empty(len(samples), np.int64)
    uid[small], first = numbered(text * max(1, len(s.lower)) + lext[small])
    parsed = [label_of([s.lower[e], blob[b:b + k].decode("utf-8", "replace")], read)
              for e, b, k in zip(lext[small][first].tolist(), start[first].tolist(), length[first].tolist())]
    for j in np.flatnonzero(~small).tolist():  # over 64 KiB: read as bytes, each on its own
        uid[j] = len(parsed)
        parsed.append(label_of([s.lower[lext[j]], None, int(at[j]), int(nbytes[j])], read))
    ukind, uvalue = np.zeros(len(parsed), np.int64), np.zeros(len(parsed), np.int64)
    for u in _in_order(uid)[1].tolist():  # class names numbered in sample order
        label, problem = parsed[u]
        if problem is not None:
            ukind[u] = BAD
        elif isinstance(label, str):
            ukind[u], uvalue[u] = NAME, names.setdefault(label, len(names))
        elif label is not None:
            ukind[u], uvalue[u] = INT, label
    kind[samples], value[samples] = ukind[uid], uvalue[uid]
    for j in np.flatnonzero(ukind[uid] == BAD).tolist():
        problems[int(samples[j])] = parsed[uid[j]][1]
    return kind, value, names, problems


def _sizes(fd: int, offset: np.ndarray, size: np.ndarray, has_image: np.ndarray,
           on: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each image's ``(height, width)`` from its header, as
    :func:`~turbofeed.decode.probe.probe_size` gives it (0: no image, no readable header):
    JPEGs by the extension (:func:`turbofeed.decode.native.jpeg_sizes`) when ``on``, the
    images it does not decide by ``probe_size``."""
    height, width = np.zeros(len(offset), np.int64), np.zeros(len(offset), np.int64)
    images = np.flatnonzero(has_image)
    at, nbytes = offset[images], size[images]
    if on:
        found = native.jpeg_sizes(fd, at, nbytes)
        height[images], width[images] = found[:, 0], found[:, 1]
        ask = np.flatnonzero(found[:, 2] == native.SIZE_ASK)
    else:
        ask = np.arange(len(images))
    heads = Window(fd).pread  # a reader of its own: the labels' reads do not evict it
    for j in ask.tolist():
        where, nb = int(at[j]), int(nbytes[j])
        height[images[j]], width[images[j]] = probe_size(lambda k: heads(k, where), nb)
    return height, width


#: The largest image the index checks (Pillow's default limit): what it writes does not
#: depend on the building process's limit, and no check decodes a decompression bomb.
#: A larger one is checked by loaders whose limit lets them decode it.
CHECK_PIXELS = 89_478_485


def _scans(fd: int, offset: np.ndarray, size: np.ndarray, sized: np.ndarray) -> np.ndarray:
    """Each sample's scan verdict (:data:`~turbofeed.decode.native.SCAN_INTACT`,
    ``SCAN_DAMAGED``, ``SCAN_UNKNOWN``): the images whose size was read (``sized``) and
    that are JPEGs, checked whole by the check every loader makes
    (:func:`~turbofeed.decode.native.scan_checks`), up to :data:`CHECK_PIXELS` pixels;
    the others, and all without the extension, unknown (loaders check those the first
    time they decode them, as without the index). The extension checks under
    ``TURBOFEED_NATIVE=0`` too: this is about which images are intact, not speed."""
    scan = np.zeros(len(offset), np.uint8)
    rows = np.flatnonzero(sized)
    if len(rows) and native.built():
        scan[rows] = native.scan_checks(fd, offset[rows], size[rows], max_pixels=CHECK_PIXELS)
    return scan


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
        width=np.array(arrays["width"][s0:s1]), scan=np.array(arrays["scan"][s0:s1]))


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
        "scan": cat("scan").astype(np.uint8),  # native.SCAN_*: 1 intact, 2 damaged, 0 not checked
    }
    return {"image_suffixes": suffixes, "member_exts": exts, "label_names": names}, arrays
