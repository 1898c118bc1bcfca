"""The sample table every source produces, and WebDataset-style grouping of members."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..decode.probe import IMAGE_EXTENSIONS  # decode knows the image types; re-exported here

LABEL_EXTENSIONS = ("cls", "txt", "json")
_JSON_LABEL_FIELDS = ("label", "cls", "class", "target")
_INT64 = range(-(1 << 63), 1 << 63)

Label = int | str | None


def split_key(name: str) -> tuple[str, str]:
    """Split a member name into (key, extension) the WebDataset way.

    The key is the directory prefix plus the file name up to its first dot; the
    extension is the rest, lower-cased::

        n01440764/n01440764_10026.JPEG -> ("n01440764/n01440764_10026", "jpeg")
        a/b.seg.png                    -> ("a/b", "seg.png")
    """
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:].lower()


def pick_member(exts_present: Collection[str], spec: str | Sequence[str]) -> str | None:
    """The extension a field spec picks among the members a sample has, or None.

    ``spec`` lists extensions separated by ``;`` (or as a sequence), compared the way
    :func:`split_key` gives them (lower case, no leading dot); the first one listed
    that the sample has wins, whatever the order of ``exts_present``::

        pick_member(("png", "jpg", "txt"), "jpg;png;webp") -> "jpg"
        pick_member(("webp", "txt"), "jpg;png;webp")       -> "webp"
        pick_member(("txt",), "jpg;png")                   -> None
        pick_member(("jpg", "seg.png"), "seg.png")         -> "seg.png"
    """
    wanted = spec.split(";") if isinstance(spec, str) else spec
    for ext in wanted:
        ext = ext.strip().lower()
        if ext in exts_present:
            return ext
    return None


def parse_label(ext: str, payload: bytes) -> Label:
    """Turn a ``.cls``/``.txt``/``.json`` payload into an int label or a class name; None
    for a JSON object without a label field (img2dataset/LAION metadata) or an empty
    ``.txt`` (an empty caption): an unlabelled sample, delivered with label -1, not a bad one.

    Raises:
        ValueError: the payload is not a label (empty, bad JSON, a label of another type,
            an integer outside the int64 range that batches hold labels in).
    """
    text = payload.decode("utf-8").strip()
    if ext == "json":
        value = json.loads(text)
        if isinstance(value, dict):
            found = [value[f] for f in _JSON_LABEL_FIELDS if f in value]
            if not found or found[0] is None:
                return None
            value = found[0]
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"JSON label {value!r} is neither an integer nor a class name")
        return _int64(value) if isinstance(value, int) else value
    if not text and ext == "txt":
        return None  # an empty caption: an unlabelled sample, as a .txt that is not an integer (io.labels)
    if not text:
        raise ValueError("empty label")
    try:
        number = int(text)
    except ValueError:
        if ext == "cls":
            raise ValueError(f".cls label {text[:40]!r} is not an integer") from None
        return text  # a .txt class name
    return _int64(number)


def _int64(value: int) -> int:
    if value not in _INT64:
        shown = str(value) if len(str(value)) <= 40 else f"{str(value)[:20]}...({len(str(value))} digits)"
        raise ValueError(f"integer label {shown} is outside the int64 range")
    return value


def _int64s() -> np.ndarray:
    return np.zeros(0, np.int64)


@dataclass
class SampleTable:
    """Samples of one source, in storage order.

    Every member of a sample (tar shards: image, caption, metadata, mask ...) is one row
    of the ``member_*`` arrays, the rows of sample ``i`` being
    ``member_start[i]:member_start[i + 1]``, in storage order; no Python object per
    sample or member (17 to 20 bytes per member, plus 8 per sample)::

        sample   member_start   member_ext -> member_exts   member_offset  member_size
        0        0              0 "jpg"                     1536           8811
                                1 "txt"                     10752          41
                                2 "json"                    11776          230
        1        3              0 "jpg"                     12800          9120
                                2 "json"                    22528          198
        (end)    5

    A table without members (image folders, HDF5, Zarr, .npy, Parquet: a sample is its
    image only) has empty ``member_*`` arrays (``has_members`` is False); its source's
    default ``read_member`` serves the image alone (see :mod:`turbofeed.io.source`).

    A table read from the dataset index (:mod:`turbofeed.io.dsindex`) holds views of the
    index's memory-mapped arrays: ``keys``, ``image_names`` and ``labels`` are lazy
    sequences (:mod:`turbofeed.io.columns`: index, ``len``, iterate, slice, compare with
    a list), the integer arrays have the narrowest unsigned dtype that holds the index's
    values (uint32 offsets when every shard is under 4 GiB: use ``int(...)`` before
    arithmetic), and ``member_start`` holds positions in ``member_*`` arrays that are the
    whole index's (``member_start[0]`` is not 0: use ``member_start[i]:member_start[i + 1]``
    as always).

    Attributes:
        keys: sample key per sample (a list, or a :class:`~turbofeed.io.columns.StrColumn`).
        image_names: member or file name holding the image.
        offsets: integer byte offset of the image payload (0 for plain files).
        sizes: integer payload size in bytes (-1 when unknown until read).
        labels: raw label per sample: int, class name, or None (a list, or a
            :class:`~turbofeed.io.columns.LabelColumn`).
        problems: (key, reason) for entries left out while indexing (not samples at all:
            a record that is not a tf.train.Example, an array row without an image).
        bad: row -> reason for samples kept in the table that are bad data for the loader
            that asked (a tar sample without an image member, or with a label that cannot
            be parsed, for a loader of images and labels): they keep their ids and fail
            when fetched, through ``on_error``, never dropped unseen.
        member_start: integers, ``len(self) + 1`` (empty without members).
        member_ext: per member, its extension's position in ``member_exts`` (the
            smallest unsigned dtype that holds them: uint8 up to 256 extensions).
        member_exts: the table's distinct member extensions, as :func:`split_key`
            gives them (``jpg``, ``txt``, ``seg.png``), in order of first appearance.
        member_offset: integer byte offset of each member's payload.
        member_size: integer payload size of each member in bytes.
        heights, widths: each image's size from its header (0: unknown), when the table
            comes from a dataset index (:mod:`turbofeed.io.dsindex`); None otherwise
            (:func:`turbofeed.io.sizes.image_sizes` probes them then).
        scans: each image's scan verdict from a dataset index (uint8,
            :data:`turbofeed.decode.native.SCAN_INTACT` where its whole scan was found
            intact while indexing); None otherwise (loaders check each JPEG's scan the first
            time they decode it: :mod:`turbofeed.engine.checked`).
    """

    keys: Sequence[str] = field(default_factory=list)
    image_names: Sequence[str] = field(default_factory=list)
    offsets: np.ndarray = field(default_factory=_int64s)
    sizes: np.ndarray = field(default_factory=_int64s)
    labels: Sequence[Label] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    bad: dict[int, str] = field(default_factory=dict)
    member_start: np.ndarray = field(default_factory=_int64s)
    member_ext: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    member_exts: tuple[str, ...] = ()
    member_offset: np.ndarray = field(default_factory=_int64s)
    member_size: np.ndarray = field(default_factory=_int64s)
    heights: np.ndarray | None = None
    widths: np.ndarray | None = None
    scans: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def has_members(self) -> bool:
        """True when the table records every member of each sample (tar shards)."""
        return len(self.member_start) == len(self.keys) + 1

    def set_members(self, members: Iterable[Iterable[tuple[str, int, int]]]) -> None:
        """Fill the ``member_*`` arrays from ``(ext, offset, size)`` per member, one
        iterable per sample, in sample order."""
        ids: dict[str, int] = {}
        start, ext, offset, size = [0], [], [], []
        for sample in members:
            for e, o, s in sample:
                ext.append(ids.setdefault(e, len(ids)))
                offset.append(o)
                size.append(s)
            start.append(len(ext))
        if len(start) != len(self.keys) + 1:
            raise ValueError(f"members for {len(start) - 1} samples, the table has {len(self.keys)}")
        self.member_start = np.asarray(start, dtype=np.int64)
        self.member_ext = np.asarray(ext, dtype=np.min_scalar_type(max(len(ids) - 1, 0)))
        self.member_exts = tuple(ids)
        self.member_offset = np.asarray(offset, dtype=np.int64)
        self.member_size = np.asarray(size, dtype=np.int64)

    def image_ext(self, i: int) -> str:
        """The extension of sample ``i``'s image as a member, from its name (``"jpeg"`` for
        ``cat/1.JPEG``); ``""`` when the name tells no image format (array rows such as
        ``images[3]`` or ``images.npy[3]``)."""
        ext = split_key(self.image_names[i])[1]
        return ext if ext.rsplit(".", 1)[-1] in IMAGE_EXTENSIONS else ""

    def exts_of(self, i: int) -> tuple[str, ...]:
        """Extensions of sample ``i``'s members, in storage order (() without members)."""
        if not self.has_members:
            return ()
        rows = self.member_ext[self.member_start[i]:self.member_start[i + 1]].tolist()
        return tuple(self.member_exts[j] for j in rows)

    def find_member(self, i: int, ext: str) -> tuple[int, int] | None:
        """(offset, size) of sample ``i``'s member with extension ``ext``, or None when
        it has none (or the table records no members)."""
        try:
            wanted = self.member_exts.index(ext)
        except ValueError:
            return None
        first = int(self.member_start[i])
        rows = self.member_ext[first:int(self.member_start[i + 1])].tolist()
        if wanted not in rows:
            return None
        row = first + rows.index(wanted)
        return int(self.member_offset[row]), int(self.member_size[row])


def group_members(names: list[str]) -> dict[str, dict[str, int]]:
    """Map each key to {extension: member index}, keys in order of first appearance."""
    groups: dict[str, dict[str, int]] = {}
    for i, name in enumerate(names):
        key, ext = split_key(name)
        groups.setdefault(key, {}).setdefault(ext, i)
    return groups


def pick_image(members: dict[str, int]) -> int | None:
    """Index of the preferred image member of one sample, or None if it has none."""
    for ext in IMAGE_EXTENSIONS:
        if ext in members:
            return members[ext]
    return None


def pick_label_member(members: dict[str, int]) -> tuple[str, int] | None:
    """(extension, index) of the label member of one sample, or None."""
    for ext in LABEL_EXTENSIONS:
        if ext in members:
            return ext, members[ext]
    return None
