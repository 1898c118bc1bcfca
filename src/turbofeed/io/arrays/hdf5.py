"""HDF5 files (h5py, the ``hdf5`` extra): pre-decoded pixels or encoded images per row.

Layouts of the images (``format_options["images"]``, default ``"images"``):

* a ``(N, H, W[, C])`` uint8 dataset of pixels;
* a 1-D dataset of N encoded images: variable-length uint8 (``h5py.vlen_dtype(np.uint8)``)
  or opaque (``np.void``) elements;
* a group with one dataset per sample (pixels ``(H, W[, C])`` or a 1-D uint8 array of
  encoded bytes), in sorted name order; the names are the keys, labels come from a
  ``labels`` dataset beside the group or a ``label`` attribute on each dataset.

How reads go (h5py runs one HDF5 call at a time under its own lock):

* contiguous, uncompressed pixels are mapped straight from the file (``np.memmap`` at
  the dataset's offset): zero-copy slices, no HDF5 call and no lock per sample;
* chunked with several samples per compressed chunk: whole chunk rows are read once and
  kept in the shared block cache (:mod:`turbofeed.io.arrays.blocks`), so a shuffled epoch
  reads each chunk once when the cache holds the dataset; ``io_stats()`` counts the
  chunk-row loads;
* anything else: one ``dataset[i]`` per sample.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ...errors import DatasetError
from ...extras import require
from ..local.files import indexed_file
from ..source import Source
from .common import (AUTO, BlockReads, as_keys, as_labels, check_pixels, listing, make_table, parse_options,
                     pick_name, rereads_warning)

log = logging.getLogger("turbofeed")

_RDCC_BYTES = 32 * 2**20  # HDF5's own chunk cache: enough for the chunks of one row block
_RDCC_SLOTS = 10007  # a prime, well above the chunks that fit (HDF5's advice: ~100x)


def _members(group: Any) -> list[str]:
    """``name (shape dtype)`` of the datasets in a file, for messages."""
    found: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if hasattr(obj, "shape") and len(found) < 40:
            found.append(f"{name} {tuple(obj.shape)} {obj.dtype}")
    group.visititems(visit)
    return found


class HDF5Source(Source):
    """One HDF5 file.

    Args:
        path: the ``.h5``/``.hdf5`` file.
        options: ``format_options``: ``images``, ``labels``, ``keys`` (dataset paths inside
            the file; ``labels``/``keys`` may be None), ``mmap`` (default True: map
            contiguous uncompressed pixels from the file).

    Raises:
        DatasetError: not an HDF5 file, a missing dataset (the message lists those that
            exist), wrong dtype or shape, or labels/keys of another length.
        MissingExtra: h5py is not installed.
    """

    encoded: bool | None  # encoded bytes per row, pixels, or None: per sample (a group)

    def __init__(self, path: str, options: dict | None = None) -> None:
        opts = parse_options(options)
        h5py = require("h5py", "hdf5", f"HDF5 file {path}")
        self.path = path
        self.file = indexed_file(path)  # before opening: a later change shows
        self._h5py = h5py
        self._mm: np.ndarray | None = None
        self._blocks: BlockReads | None = None
        try:
            self._file = h5py.File(path, "r", rdcc_nbytes=_RDCC_BYTES, rdcc_nslots=_RDCC_SLOTS, rdcc_w0=1.0)
        except OSError as exc:
            raise DatasetError(f"{path}: not a readable HDF5 file ({exc})") from None
        try:
            self._open(opts)
        except Exception:
            self._file.close()
            raise

    # -- opening -----------------------------------------------------------------------
    def _open(self, opts: dict) -> None:
        f, h5py = self._file, self._h5py
        described = lambda: _members(f)  # noqa: E731 (only built for an error message)
        name = pick_name(self.path, opts["images"], ["images"], f, "images dataset",
                         required=True, option="images", described=described)
        images = f[name]
        self.images_name = name
        if isinstance(images, h5py.Group):
            self._open_group(images, opts)
            return
        self._images = images
        n = images.shape[0] if images.ndim else 0
        if images.ndim == 1 and self._encoded_dtype(images.dtype):
            self.encoded = True
            self._item = self._bytes_of
        else:
            check_pixels(self.path, name, images.dtype, images.shape)
            self.encoded = False
            self._item = lambda value: value
        labels_name = pick_name(self.path, opts["labels"], ["labels", "label"], f, "labels dataset",
                                required=False, option="labels", described=described)
        keys_name = pick_name(self.path, opts["keys"], ["keys"], f, "keys dataset",
                              required=False, option="keys", described=described)
        labels = as_labels(self.path, labels_name, self._read_all(labels_name), n) if labels_name else None
        keys = as_keys(self.path, keys_name, self._read_all(keys_name) if keys_name else None, n)
        sample_nbytes = -1 if self.encoded else int(np.prod(images.shape[1:]))
        self.table = make_table(keys, labels, name, sample_nbytes)
        self.read_mode = self._choose_reads(images, opts["mmap"] is not False)

    def _read_all(self, name: str) -> np.ndarray:
        obj = self._file[name]
        if not hasattr(obj, "shape"):
            raise DatasetError(f"{self.path}: {name!r} is a group, not a dataset")
        values = obj[()]
        if obj.dtype.kind == "O" or self._h5py.check_string_dtype(obj.dtype) is not None:
            values = np.array([v.decode("utf-8") if isinstance(v, bytes) else v
                               for v in np.asarray(values).ravel()], dtype=object)
        return values

    def _encoded_dtype(self, dtype: np.dtype) -> bool:
        return self._h5py.check_vlen_dtype(dtype) == np.dtype(np.uint8) or dtype.kind == "V"

    @staticmethod
    def _bytes_of(value: Any) -> bytes:
        if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 1:
            return value.tobytes()
        if isinstance(value, bytes):
            return bytes(value)
        if isinstance(value, np.void):  # opaque ("V") elements: their raw bytes
            return value.tobytes()
        raise ValueError(f"element of type {type(value).__name__} is not encoded image bytes")

    def _choose_reads(self, images: Any, mmap: bool) -> str:
        """Pick the cheapest correct way to read one sample (see the module docstring)."""
        chunks = images.chunks
        if not self.encoded and mmap and chunks is None and not images.compression and \
                images.external is None:
            offset = images.id.get_offset()  # absolute, user block included
            if offset is not None and images.shape[0] > 0:
                mm = np.memmap(self.path, dtype=images.dtype, mode="r", offset=offset, shape=images.shape)
                last = images.shape[0] - 1
                if np.array_equal(mm[0], images[0]) and np.array_equal(mm[last], images[last]):
                    self._mm = mm
                    return "mmap"
                log.warning("turbofeed: %s: the mapped bytes of %r differ from what h5py reads; "
                            "reading through h5py", self.path, self.images_name)
        filtered = bool(images.compression) or bool(images.id.get_create_plist().get_nfilters())
        if chunks is not None and chunks[0] > 1 and filtered:
            n = images.shape[0]
            per_row = max(1, int(np.prod(images.shape[1:])) * images.dtype.itemsize) if not self.encoded \
                else int(images.id.get_storage_size() / max(1, n)) or 1

            def load(start: int, stop: int) -> tuple[Any, int]:
                rows = images[start:stop]
                size = rows.nbytes if not self.encoded else sum(len(r) for r in rows)
                return rows, size
            item = (lambda rows, j: self._bytes_of(rows[j])) if self.encoded else None
            self._blocks = BlockReads.uniform(n, chunks[0], load, item)
            note = rereads_warning(self.path, self.images_name, chunks[0], per_row * n)
            if note:
                log.warning("turbofeed: %s", note)
            return "chunk-rows"
        return "h5py"

    def _open_group(self, group: Any, opts: dict) -> None:
        h5py = self._h5py
        members = sorted(k for k, v in group.items() if isinstance(v, h5py.Dataset))
        if not members:
            raise DatasetError(f"{self.path}: group {group.name!r} holds no datasets (has "
                               f"{listing(list(group))})")
        self._members = [group[k] for k in members]
        self.encoded = None  # per sample
        self._item = lambda value: value
        labels_name = pick_name(self.path, opts["labels"], ["labels", "label"], self._file,
                                "labels dataset", required=False, option="labels",
                                described=lambda: _members(self._file))
        if labels_name:
            labels = as_labels(self.path, labels_name, self._read_all(labels_name), len(members))
        elif opts["labels"] is AUTO and all("label" in d.attrs for d in self._members):
            labels = as_labels(self.path, "label attributes",
                               [np.asarray(d.attrs["label"]).item() for d in self._members], len(members))
        else:
            labels = None
        if opts["keys"] not in (AUTO, None):
            raise DatasetError(f"{self.path}: the keys of a group of per-sample datasets are their "
                               "names; drop format_options['keys']")
        self.table = make_table(members, labels, group.name.lstrip("/"))
        self.table.image_names = [f"{group.name.lstrip('/')}/{k}" for k in members]
        self.read_mode = "per-sample datasets"

    # -- reading -----------------------------------------------------------------------
    def read(self, i: int) -> bytes | np.ndarray:
        """Sample ``i``: a uint8 (H, W[, C]) array (a zero-copy view when mapped) or encoded bytes."""
        if self._mm is not None:
            return self._mm[i]
        if self._blocks is not None:
            return self._blocks.read(i)
        if self.encoded is None:  # a group of per-sample datasets
            value = self._members[i][()]
            if isinstance(value, np.void) or (value.ndim == 1 and value.dtype == np.uint8):
                return self._bytes_of(value)
            return value
        return self._item(self._images[i])

    def io_stats(self) -> dict[str, Any]:
        """How samples are read and, for chunk rows, how many loads the cache saved."""
        stats: dict[str, Any] = {"read_mode": self.read_mode}
        if self._blocks is not None:
            stats.update(self._blocks.stats())
        return stats

    def close(self) -> None:
        if self._blocks is not None:
            self._blocks.close()
        self._mm = None
        try:
            self._file.close()
        except Exception:  # closing twice, or at interpreter exit
            pass

    def __repr__(self) -> str:
        return f"HDF5Source({self.path!r}, samples={len(self.table)}, reads={self.read_mode})"
