"""Which storage format a path holds (by extension, Zarr metadata, or an explicit ``format=``),
and opening the array/table sources.

=========  ================================  ===========================  ===========
format     recognised by                     source                       extra
=========  ================================  ===========================  ===========
tar        ``.tar`` ``.tar.gz`` ``.tgz``     :class:`TarSource`           (core)
           ``.tar.bz2`` ``.tar.xz``
folder     any other directory               :class:`FolderSource`        (core)
hdf5       ``.h5 .hdf5 .hdf .he5``           :class:`HDF5Source`          ``hdf5``
zarr       ``.zarr`` or Zarr metadata        :class:`ZarrSource`          ``zarr``
npy        ``.npy`` (not a labels/keys file) :class:`NpySource`           (core)
parquet    ``.parquet .pq``                  :class:`ParquetSource`       ``parquet``
=========  ================================  ===========================  ===========

A directory holding ``.tar`` shards stays a shard list, and one with sub-folders an
ImageFolder; a flat one holding data files of one of these formats is the list of those
files (``images.npy`` beside its ``labels.npy``, a folder of Parquet files).
"""

from __future__ import annotations

import os

from ..errors import DatasetError
from .npy import is_sibling
from .zarr_store import is_zarr_store

FORMATS = ("tar", "folder", "hdf5", "zarr", "npy", "parquet")
EXTENSIONS = {
    "tar": (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst"),  # zstd: reported
    "hdf5": (".h5", ".hdf5", ".hdf", ".he5"),
    "zarr": (".zarr",),
    "npy": (".npy",),
    "parquet": (".parquet", ".pq"),
}
ARRAY_FORMATS = ("hdf5", "zarr", "npy", "parquet")


def check_format(format: str | None) -> None:
    if format is not None and format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS} or None (by extension), got {format!r}")


def format_of_name(path: str) -> str | None:
    """The format a file or directory name says, or None."""
    lower = os.path.normpath(path).lower()
    for fmt, extensions in EXTENSIONS.items():
        if lower.endswith(extensions):
            return fmt
    return None


def classify_file(path: str, format: str | None = None) -> tuple[str, str] | None:
    """``(format, path)`` for a file of an array/table format (or any file when ``format``
    says what it is), None for the callers' own rules (tar, errors)."""
    if format is not None:
        if format in ("folder", "zarr"):
            raise DatasetError(f"{path}: format={format!r} needs a directory, this is a file")
        return format, path
    fmt = format_of_name(path)
    if fmt in ARRAY_FORMATS:
        if fmt == "npy" and is_sibling(os.path.basename(path)):
            raise DatasetError(f"{path}: a labels/keys file; pass the images .npy beside it")
        return fmt, path
    return None


def expand_dir(path: str, format: str | None = None) -> list[tuple[str, str]] | None:
    """What a directory holds: a Zarr store, or the data files of one format, or None
    (then: tar shards if any, else an ImageFolder)."""
    if format in ("folder", "zarr"):
        return [(format, path)]
    if format is None and (is_zarr_store(path) or format_of_name(path) == "zarr"):
        return [("zarr", path)]
    files = sorted(e.path for e in os.scandir(path) if e.is_file())
    if format is not None:
        found = [(format, f) for f in files if f.lower().endswith(EXTENSIONS[format])
                 and not (format == "npy" and is_sibling(os.path.basename(f)))]
        if not found:
            raise DatasetError(f"{path}: no {'/'.join(EXTENSIONS[format])} files in this folder "
                               f"(format={format!r})")
        return found
    if any(f.endswith(EXTENSIONS["tar"]) for f in files) or any(
            e.is_dir() and not e.name.startswith(".") for e in os.scandir(path)):
        return None  # tar shards, or class folders of an ImageFolder (as before)
    for fmt in ("parquet", "hdf5", "npy"):
        found = [(fmt, f) for f in files if f.lower().endswith(EXTENSIONS[fmt])
                 and not (fmt == "npy" and is_sibling(os.path.basename(f)))]
        if found:
            return found
    return None


def open_source(kind: str, path: str, options: dict | None = None, *, s3: object = None):
    """Open one array/table source (HDF5, Zarr, .npy or Parquet); ``s3`` is the
    :class:`~turbofeed.io.s3client.S3Config` for ``s3://`` Zarr stores."""
    if kind == "hdf5":
        from .hdf5 import HDF5Source

        return HDF5Source(path, options)
    if kind == "zarr":
        from .zarr_store import ZarrSource

        return ZarrSource(path, options, s3=s3)
    if kind == "npy":
        from .npy import NpySource

        return NpySource(path, options)
    if kind == "parquet":
        from .parquet import ParquetSource

        return ParquetSource(path, options)
    raise ValueError(f"not an array/table format: {kind!r}")
