"""TFRecord files of ``tf.train.Example`` records (the TensorFlow ImageNet layout), read
without TensorFlow: the file is scanned once into an index of where each encoded image
lies, then a sample is one pread of its bytes.

Feature names (``format_options``): ``images`` (default ``image/encoded``, a bytes
feature holding the encoded image), ``labels`` (default ``image/class/label``, an int64
feature, or a bytes one holding a class name; None: unlabelled) and ``keys`` (default
``image/filename``; absent or None: the record number ``f"{record:08d}"``, which loaders
deliver as ``"{file name}/{record:08d}"`` like every key). A record without
the image feature is a problem (``table.problems``), not an error.

Checksums: each record's length CRC (masked CRC-32C) is checked while indexing; a
mismatch, or a record cut short, ends the usable part of the file (the samples before
it are kept: the records after it cannot be found) and is reported like a cut tar shard
(:class:`TarDamage`: a warning and ``IndexedDataset.damaged``, or a DatasetError under
``on_damage="raise"``). The data CRC is checked too, with a C CRC-32C (google-crc32c):
while indexing, so the features of a damaged record are never trusted (its row holds
only its place, keyed by its record number), and again each time a sample is read (the
whole record, about 5 us per 110 KB record), so a flipped bit in an image, a label or a
key makes that sample bad (``on_error`` replaces, skips or raises, naming the file and
the record), whenever the damage happened.

The index (JSON, one row per sample) is cached like a tar shard's
(:func:`~turbofeed.io.local.index.cached_index`), keyed by the file's identity and the
feature names, so a rewritten file is indexed anew.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

import numpy as np

from ...errors import DatasetError
from ..local.files import FILES, FileId, FileRef, file_id, views_enabled
from ..local.index import INDEX_VERSION, TarDamage, cached_index, default_cache_dir
from ..source import Source
from ..table import SampleTable
from .common import AUTO, listing, parse_options
from .tfrecord_wire import Records, WireError, masked_crc32c, parse_example

log = logging.getLogger("turbofeed")

#: Default feature names (TensorFlow's ImageNet TFRecords).
DEFAULTS = {"images": "image/encoded", "labels": "image/class/label", "keys": "image/filename"}
_LAYOUT = 2  # the layout of this index; bumped when it changes (2: the record's place and data CRC)


def _names(path: str, options: dict | None) -> dict[str, str | None]:
    opts = parse_options(options)
    names: dict[str, str | None] = {}
    for what, default in DEFAULTS.items():
        value = opts[what]
        names[what] = default if value is AUTO else value
    if names["images"] is None:
        raise DatasetError(f"{path}: format_options 'images' cannot be None: the image feature is required")
    return names


def _label(kind: str, values: list, data: bytes) -> Any:
    if not values:
        return None
    if kind == "int64":
        return values[0]
    if kind == "bytes":
        start, end = values[0]
        return data[start:end].decode("utf-8") or None
    raise ValueError(f"a {kind} label (turbofeed reads int64 labels or bytes class names)")


def _sample(data: bytes, offset: int, record: int, crc: int,
            names: dict[str, str | None], seen: set[str]) -> tuple[list, str | None]:
    """``([key, record, image offset, image size, label, data offset, data size, data
    CRC], None)`` for a record, or ``([key], why)``. A record whose data fails its CRC is
    not parsed: its row spans the whole record, and reading it fails the same check."""
    key = f"{record:08d}"
    place = [offset, len(data), crc]
    if masked_crc32c(data) != crc:
        return [key, record, offset, len(data), None, *place], None
    try:
        features = parse_example(data)
    except WireError as exc:
        return [key], f"record {record} is not a tf.train.Example ({exc})"
    seen.update(features)
    if names["keys"] is not None and names["keys"] in features:
        kind, values = features[names["keys"]]
        if kind == "bytes" and values:
            key = data[values[0][0]:values[0][1]].decode("utf-8", "replace")
    image = features.get(str(names["images"]))  # never None (_names)
    if image is None or image[0] != "bytes" or not image[1]:
        have = "no" if image is None else (f"a non-bytes ({image[0]})" if image[0] != "bytes" else "an empty")
        return [key], f"record {record} has {have} image feature {names['images']!r}"
    label = None
    if names["labels"] is not None and names["labels"] in features:
        try:
            label = _label(*features[names["labels"]], data)
        except (ValueError, UnicodeDecodeError) as exc:
            return [key], f"label {names['labels']!r}: {exc}"
    start, end = image[1][0]
    return [key, record, offset + start, end - start, label, *place], None


def _build_index(path: str, names: dict[str, str | None]) -> dict:
    """Scan ``path`` once from one open descriptor, recording that file's identity."""
    rows: list[list] = []
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    with open(path, "rb") as f:
        identity = FileId.of(os.fstat(f.fileno()))
        records = Records(f, identity.size)
        for record, (offset, data, crc) in enumerate(records):
            row, problem = _sample(data, offset, record, crc, names, seen)
            if problem is None:
                rows.append(row)
            else:
                problems.append((row[0], problem))
    damage = records.damage
    if identity.size == 0:
        damage = TarDamage(0, "empty file (0 bytes)", cut=False)
    elif not rows and damage is None:
        damage = TarDamage(0, f"no samples ({records.count} records, none with image feature "
                           f"{names['images']!r}; features seen: {listing(sorted(seen))})", cut=False)
    return {"version": INDEX_VERSION, "layout": _LAYOUT, "file": identity.as_dict(), "names": names,
            "rows": rows, "problems": problems, "seen": sorted(seen),
            "damage": None if damage is None else damage.as_list()}


def load_tfrecord_index(path: str, names: dict[str, str | None], cache_dir: str | None = None) -> dict:
    """The index of TFRecord file ``path`` for these feature ``names``: from the cache when
    built from this very file (same identity) with the same names, else built and cached."""
    cache_dir = cache_dir or default_cache_dir()
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:20]
    cached = os.path.join(cache_dir, "tfrecord-index", f"{digest}.json")
    key = {"layout": _LAYOUT, "file": file_id(path).as_dict(), "names": names}
    return cached_index(cached, key, lambda: _build_index(path, names), path)


class TFRecordSource(Source):
    """One TFRecord file of ``tf.train.Example`` records; ``read(i)`` is one pread of the
    sample's record, whose data CRC is checked, and gives the encoded image in it (no
    protobuf parsing after indexing).

    Args:
        path: the file.
        format_options: ``images``, ``labels``, ``keys``: feature names (see the module
            docstring); unknown option names are refused.
        cache_dir: where the index is cached (default :func:`default_cache_dir`).
        on_damage: ``"raise"`` to fail on a cut, corrupt or empty file; ``"skip"`` to
            keep the samples before the damage and log a warning (``damage`` says why).

    Raises:
        ValueError: an unknown option name.
        DatasetError: damage under ``on_damage="raise"``; a ``labels``/``keys`` feature
            named in ``format_options`` that no record has.
    """

    file: FileRef

    def __init__(self, path: str, format_options: dict | None = None, *, cache_dir: str | None = None,
                 on_damage: str = "skip") -> None:
        self.path = path
        names = _names(path, format_options)
        try:
            index = load_tfrecord_index(path, names, cache_dir)
        except OSError as exc:
            raise DatasetError(f"{path}: cannot read the TFRecord file ({exc})") from None
        self.file = FileRef(path, FileId(**index["file"]))
        self.damage = None if index["damage"] is None else TarDamage(*index["damage"])
        if self.damage is not None:
            message = self.damage.describe(path, len(index["rows"]))
            if on_damage == "raise":
                raise DatasetError(message)
            log.warning("turbofeed: %s", message)
        opts = parse_options(format_options)
        for what in ("labels", "keys"):
            wanted = opts[what]
            if wanted not in (AUTO, None) and wanted not in index["seen"] and index["rows"]:
                raise DatasetError(f"{path}: no record has a feature {wanted!r} (has "
                                   f"{listing(index['seen'])})")
        rows, base = index["rows"], os.path.basename(path)
        self.table = SampleTable(
            keys=[r[0] for r in rows], image_names=[f"{base}[{r[1]}]" for r in rows],  # no image ext
            offsets=np.asarray([r[2] for r in rows], dtype=np.int64),
            sizes=np.asarray([r[3] for r in rows], dtype=np.int64),
            labels=[r[4] for r in rows], problems=[tuple(p) for p in index["problems"]])
        self._records = np.asarray([r[1] for r in rows], dtype=np.int64)
        self._data_offsets = np.asarray([r[5] for r in rows], dtype=np.int64)
        self._data_sizes = np.asarray([r[6] for r in rows], dtype=np.int64)
        self._crcs = [r[7] for r in rows]
        self._views = views_enabled()

    def _record(self, i: int) -> tuple[bytes, int]:
        """The data of sample ``i``'s record, its CRC checked, and where the image starts in it.

        Raises:
            ValueError: the data fails its CRC (a damaged record: a bad sample).
            StorageError: the file vanished or changed since it was indexed (replaced,
                rewritten, truncated), or the read failed.
        """
        offset, size = int(self._data_offsets[i]), int(self._data_sizes[i])
        if self._views:  # google-crc32c takes bytes only: a copy out of the map, checked by the CRC
            data = bytes(FILES.view(self.file, size, offset))
        else:
            data = FILES.pread_exact(self.file, size, offset)
        if masked_crc32c(data) != self._crcs[i]:
            raise ValueError(f"record {int(self._records[i])} (bytes {offset}..{offset + len(data)}) fails "
                             "its data checksum (CRC-32C): the record is damaged")
        return data, int(self.table.offsets[i]) - offset

    def read(self, i: int) -> bytes:
        """Encoded image bytes of sample ``i``, out of its record (one checked ``pread``, or
        a copy out of the mapped file under ``TURBOFEED_MMAP=1``), whose data CRC is checked.

        Raises:
            ValueError: the record's data fails its CRC.
            StorageError: the file vanished or changed since it was indexed (replaced,
                rewritten, truncated), or the read failed.
        """
        data, start = self._record(i)
        return data[start:start + int(self.table.sizes[i])]

    def view(self, i: int) -> bytes | memoryview:
        """Sample ``i`` as a view of its checked record (no copy of the image out of it).

        Raises:
            As :meth:`read`.
        """
        data, start = self._record(i)
        return memoryview(data)[start:start + int(self.table.sizes[i])]

    def io_stats(self) -> dict[str, Any]:
        return {"read_mode": "pread"}

    def close(self) -> None:
        FILES.close(self.file)

    def __repr__(self) -> str:
        return f"TFRecordSource({self.path!r}, samples={len(self.table)})"
