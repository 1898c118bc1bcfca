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
it are kept) and is reported like a cut tar shard (:class:`TarDamage`: a warning and
``Dataset.damaged``, or a DatasetError under ``on_damage="raise"``). The data CRC is not
checked, for speed: indexing parses every record, reads only the image bytes later, and
the image decoder rejects damaged images.

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
from .tfrecord_wire import Records, WireError, parse_example

log = logging.getLogger("turbofeed")

#: Default feature names (TensorFlow's ImageNet TFRecords).
DEFAULTS = {"images": "image/encoded", "labels": "image/class/label", "keys": "image/filename"}
_LAYOUT = 1  # the layout of this index; bumped when it changes


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


def _sample(data: bytes, offset: int, record: int,
            names: dict[str, str | None], seen: set[str]) -> tuple[list, str | None]:
    """``([key, record, offset, size, label], None)`` for a record, or ``([key], why)``."""
    key = f"{record:08d}"
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
    return [key, record, offset + start, end - start, label], None


def _build_index(path: str, names: dict[str, str | None]) -> dict:
    """Scan ``path`` once from one open descriptor, recording that file's identity."""
    rows: list[list] = []
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    with open(path, "rb") as f:
        identity = FileId.of(os.fstat(f.fileno()))
        records = Records(f, identity.size)
        for record, (offset, data) in enumerate(records):
            row, problem = _sample(data, offset, record, names, seen)
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
    encoded image (no protobuf parsing after indexing).

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
        self._views = views_enabled()

    def read(self, i: int) -> bytes:
        """Encoded image bytes of sample ``i`` with one positional read (releases the GIL).

        Raises:
            StorageError: the file vanished or changed since it was indexed (replaced,
                rewritten, truncated), or the read failed.
        """
        return FILES.pread_exact(self.file, int(self.table.sizes[i]), int(self.table.offsets[i]))

    def view(self, i: int) -> bytes | memoryview:
        """Sample ``i`` without a copy: a view of the mapped file under
        ``TURBOFEED_MMAP=1``, else :meth:`read`. Valid as long as it is referenced."""
        if not self._views:
            return self.read(i)
        return FILES.view(self.file, int(self.table.sizes[i]), int(self.table.offsets[i]))

    def io_stats(self) -> dict[str, Any]:
        return {"read_mode": "pread"}

    def close(self) -> None:
        FILES.close(self.file)

    def __repr__(self) -> str:
        return f"TFRecordSource({self.path!r}, samples={len(self.table)})"
