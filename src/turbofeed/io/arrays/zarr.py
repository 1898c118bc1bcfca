"""Zarr stores (zarr-python, the ``zarr`` extra): format v2 and v3, local directories and
``s3://bucket/path.zarr`` (zarr-python 3 with obstore, through the S3 client's store for
the bucket, so endpoint and credentials come from the same :class:`S3Config`).

A store is a group with an ``images`` array (``(N, H, W[, C])`` uint8, or N
variable-length byte strings of encoded images) and optional ``labels`` and ``keys``
arrays; a store whose root is an array is read as the images alone.

Zarr reads and decompresses whole chunks. With one sample per chunk each read is one
chunk; with several, chunk rows go through the shared block cache
(:mod:`turbofeed.io.arrays.blocks`) so a shuffled epoch loads each chunk once when the cache
holds the array; ``io_stats()`` counts the loads. Sharded v3 arrays are read by their
inner chunks.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from ...base.renamed import accepts_renamed
from ...errors import DatasetError
from ...extras import require
from ..stores.config import parse_url
from ..stores.urls import shared_client
from ..source import Source
from .common import (BlockReads, as_keys, as_labels, check_pixels, make_table, parse_options, pick_name,
                     rereads_warning)

log = logging.getLogger("turbofeed")


def is_zarr_store(path: str) -> bool:
    """A directory with Zarr metadata at its root (v2 ``.zgroup``/``.zarray``, v3 ``zarr.json``)."""
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, name)) for name in ("zarr.json", ".zgroup", ".zarray"))


def _as_bytes(value: Any) -> bytes:
    """One element of a variable-length bytes array as bytes (trailing NULs kept)."""
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, np.ndarray) and (value.dtype.kind == "S" or value.dtype == np.uint8):
        return value.tobytes()
    raise ValueError(f"element of type {type(value).__name__} is not encoded image bytes")


def _open_s3(zarr: Any, url: str, config: Any) -> Any:
    """Open ``s3://bucket/key`` read-only with zarr's ObjectStore over the bucket's obstore
    store from :mod:`turbofeed.io.stores.urls` (obstore retries its own requests)."""
    storage: Any = getattr(zarr, "storage", None)
    client = shared_client(config)
    if not hasattr(storage, "ObjectStore") or getattr(client, "backend", None) != "obstore":
        raise DatasetError(f"{url}: s3:// Zarr stores need zarr-python >= 3 and obstore "
                           "(pip install 'turbofeed[zarr,s3]')")
    bucket, key = parse_url(url)
    store = storage.ObjectStore(client.obstore_store(f"s3://{bucket}"), read_only=True)
    return zarr.open(store=store, path=key.strip("/"), mode="r")


class _Members:
    """``name in members`` for paths inside a Zarr group, and their listing for messages."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def __contains__(self, name: object) -> bool:
        try:
            self.group[name]
            return True
        except Exception:  # KeyError, or a store-specific "not found"
            return False

    def describe(self) -> list[str]:
        found = []
        for name in sorted(self.group.array_keys()):
            arr = self.group[name]
            found.append(f"{name} {tuple(arr.shape)} {arr.dtype}")
        return found + [f"{g}/" for g in sorted(self.group.group_keys())]


class ZarrSource(Source):
    """One Zarr store.

    Args:
        path: the store's directory (``data.zarr``) or ``s3://bucket/prefix/data.zarr``.
        options: ``format_options``: ``images``, ``labels``, ``keys`` (array paths in the
            group; ``labels``/``keys`` may be None).
        storage: the :class:`~turbofeed.io.S3Config` for an ``s3://`` store
            (default: the process default); ``s3=``, its old name, is accepted for one
            release.

    Raises:
        DatasetError: not a Zarr store, a missing array (the message lists those that
            exist), wrong dtype or shape, labels/keys of another length.
        MissingExtra: zarr is not installed.
    """

    @accepts_renamed
    def __init__(self, path: str, options: dict | None = None, *, storage: Any = None) -> None:
        opts = parse_options(options)
        zarr = require("zarr", "zarr", f"Zarr store {path}")
        self.path = path
        self._blocks: BlockReads | None = None
        remote = path.startswith("s3://")
        if not remote and not os.path.exists(path):
            raise DatasetError(f"{path}: no such Zarr store")
        try:
            root = _open_s3(zarr, path, storage) if remote else zarr.open(store=path, mode="r")
        except DatasetError:
            raise
        except Exception as exc:  # zarr raises several types for a missing/corrupt store
            raise DatasetError(f"{path}: not a readable Zarr store ({type(exc).__name__}: {exc})") from None
        self.zarr_format = getattr(getattr(root, "metadata", None), "zarr_format", 2)
        if hasattr(root, "array_keys"):
            members = _Members(root)
            name = pick_name(path, opts["images"], ["images"], members, "images array", required=True,
                             option="images", described=members.describe)
            images = self._array(root, name)
            labels_name = pick_name(path, opts["labels"], ["labels", "label"], members, "labels array",
                                    required=False, option="labels", described=members.describe)
            keys_name = pick_name(path, opts["keys"], ["keys"], members, "keys array", required=False,
                                  option="keys", described=members.describe)
        else:  # the store is one array: images only
            name, images, labels_name, keys_name = "", root, None, None
        self.images_name = name or "<root>"
        self._images = images
        n = images.shape[0] if images.ndim else 0
        self.encoded = images.ndim == 1 and images.dtype.kind in "OSV"
        if not self.encoded:
            check_pixels(path, self.images_name, images.dtype, images.shape)
        labels = as_labels(path, labels_name, self._read_all(root, labels_name), n) if labels_name else None
        keys = as_keys(path, keys_name, self._read_all(root, keys_name) if keys_name else None, n)
        sample_nbytes = -1 if self.encoded else int(np.prod(images.shape[1:]))
        self.table = make_table(keys, labels, self.images_name, sample_nbytes)
        rows = int(images.chunks[0]) if images.ndim else 1
        if rows > 1:
            def load(start: int, stop: int) -> tuple[Any, int]:
                block = images[start:stop]
                size = sum(len(_as_bytes(b)) for b in block) if self.encoded else block.nbytes
                return block, size
            self._blocks = BlockReads.uniform(n, rows, load, (lambda b, j: _as_bytes(b[j])) if self.encoded else None)
            if not self.encoded:
                note = rereads_warning(path, self.images_name, rows, sample_nbytes * n)
                if note:
                    log.warning("turbofeed: %s", note)
        self.read_mode = "chunk-rows" if rows > 1 else "per-sample chunks"

    def _array(self, group: Any, name: str) -> Any:
        arr = group[name]
        if not hasattr(arr, "shape"):
            raise DatasetError(f"{self.path}: {name!r} is a group, not an array")
        return arr

    def _read_all(self, group: Any, name: str) -> np.ndarray:
        values = self._array(group, name)[...]
        if values.dtype.kind in "OT" or values.dtype.kind == "U" or str(values.dtype).startswith("StringDType"):
            values = np.array([v.decode("utf-8") if isinstance(v, bytes) else str(v)
                               for v in values.ravel()], dtype=object)
        return values

    def read(self, i: int) -> bytes | np.ndarray:
        """Sample ``i``: a uint8 (H, W[, C]) array, or the encoded image bytes."""
        if self._blocks is not None:
            return self._blocks.read(i)
        if self.encoded:
            return _as_bytes(self._images[i:i + 1][0])  # a slice keeps trailing NUL bytes
        return self._images[i]

    def io_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = {"read_mode": self.read_mode, "zarr_format": self.zarr_format}
        if self._blocks is not None:
            stats.update(self._blocks.stats())
        return stats

    def close(self) -> None:
        if self._blocks is not None:
            self._blocks.close()

    def __repr__(self) -> str:
        return f"ZarrSource({self.path!r}, v{self.zarr_format}, samples={len(self.table)})"
