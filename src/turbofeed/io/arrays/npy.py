"""Memory-mapped ``.npy`` image arrays: ``(N, H, W[, C])`` uint8, zero-copy random access.

Labels and keys live in sibling ``.npy`` files. For ``DIR/NAME.npy`` the first that
exists of ``NAME.labels.npy``, ``NAME_labels.npy`` (and ``labels.npy`` when NAME is
``images``) holds the labels; the same with ``keys`` for the keys. ``turbofeed convert
SRC DST --to npy`` writes ``DST/images.npy``, ``labels.npy`` and ``keys.npy``.
``format_options`` ``labels``/``keys`` name other files (relative to the images' folder)
or None.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...errors import DatasetError
from ..local.files import indexed_file
from ..source import Source
from .common import AUTO, as_keys, as_labels, check_pixels, make_table, parse_options

_SIBLING_SUFFIXES = ("labels", "keys")


def sibling_candidates(path: str, what: str) -> list[str]:
    """Where the ``what`` (``labels``/``keys``) of images file ``path`` may be, in order."""
    folder, name = os.path.split(path)
    stem = name[:-4] if name.endswith(".npy") else name
    names = [f"{stem}.{what}.npy", f"{stem}_{what}.npy"] + ([f"{what}.npy"] if stem == "images" else [])
    return [os.path.join(folder, n) for n in names]


def is_sibling(name: str) -> bool:
    """A labels/keys file, not an images array (``labels.npy``, ``x.labels.npy``, ``x_keys.npy``)."""
    stem = name[:-4] if name.endswith(".npy") else name
    return any(stem == s or stem.endswith((f".{s}", f"_{s}")) for s in _SIBLING_SUFFIXES)


def _load(path: str, what: str, mmap: bool) -> np.ndarray:
    """np.load with the reason in a DatasetError for anything that is not a usable .npy."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                np.lib.format.read_array_header_1_0(f)
            else:
                np.lib.format.read_array_header_2_0(f)
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such {what} file") from None
    except (ValueError, OSError, EOFError) as exc:
        if "mmap length" in str(exc) or "cannot reshape" in str(exc) or "EOF" in str(exc).upper():
            reason = f"truncated: the file is shorter than its header says ({exc})"
        else:
            reason = f"not a readable .npy array ({exc})"
        raise DatasetError(f"{path}: {what} {reason}") from None


class NpySource(Source):
    """One ``.npy`` array of images, memory-mapped; ``read(i)`` is a zero-copy view.

    Args:
        path: the images ``.npy``.
        options: ``format_options``: ``labels``, ``keys`` (sibling file names or None).

    Raises:
        DatasetError: not a .npy file, truncated, wrong dtype or shape, or labels/keys of
            another length.
    """

    def __init__(self, path: str, options: dict | None = None) -> None:
        opts = parse_options(options)
        if opts["images"] is not AUTO:
            raise DatasetError(f"{path}: the images of a .npy source are the file itself; pass the "
                               "file's path instead of format_options['images']")
        self.path = path
        self.file = indexed_file(path)  # before opening: a later change shows
        images = _load(path, "images", mmap=True)
        check_pixels(path, os.path.basename(path), images.dtype, images.shape)
        self._images = images
        n = images.shape[0]
        labels_path = self._sibling(opts["labels"], "labels")
        keys_path = self._sibling(opts["keys"], "keys")
        labels = None
        if labels_path is not None:
            labels = as_labels(path, os.path.basename(labels_path), _load(labels_path, "labels", False), n)
        keys = as_keys(path, keys_path and os.path.basename(keys_path),
                       _load(keys_path, "keys", False) if keys_path else None, n)
        self.labels_path, self.keys_path = labels_path, keys_path
        self.table = make_table(keys, labels, os.path.basename(path), int(np.prod(images.shape[1:])))

    def _sibling(self, wanted: Any, what: str) -> str | None:
        if wanted is None:
            return None
        if wanted is not AUTO:
            found = os.path.join(os.path.dirname(self.path), os.fspath(wanted))
            if not os.path.isfile(found):
                raise DatasetError(f"{self.path}: no {what} file {found}")
            return found
        return next((p for p in sibling_candidates(self.path, what) if os.path.isfile(p)), None)

    def read(self, i: int) -> np.ndarray:
        """Sample ``i`` as a read-only view into the mapped file (pages load on first touch)."""
        return self._images[i]

    def io_stats(self) -> dict:
        return {"read_mode": "mmap"}

    def close(self) -> None:
        pass  # views handed out keep the mapping alive; it closes when they are gone

    def __repr__(self) -> str:
        return f"NpySource({self.path!r}, samples={len(self.table)}, shape={self._images.shape[1:]})"
