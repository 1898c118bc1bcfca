"""The one registry of formats: which format a path holds (by extension, Zarr metadata, or an
explicit ``format=``), and the one factory that opens its source.

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
tfrecord   ``.tfrecord .tfrec .tfrecords``   :class:`TFRecordSource`      (core)
(s3)       ``s3://`` tar shards              :class:`S3TarSource`         ``s3``
=========  ================================  ===========================  ===========

A directory holding ``.tar`` shards stays a shard list, and one with sub-folders an
ImageFolder; a flat one holding data files of one of these formats is the list of those
files (``images.npy`` beside its ``labels.npy``, a folder of Parquet or TFRecord files). ``s3://``
items are tar shards (listed by :func:`turbofeed.io.stores.urls.resolve_urls`), or a Zarr store
when they end in ``.zarr``.

Adding a format: a :class:`~turbofeed.io.Source` class and one :class:`Format` in
:data:`KINDS` (its name, suffixes and opener). Adding an object store: one
:class:`~turbofeed.io.stores.families.Store` in
:data:`~turbofeed.io.stores.families.STORES`, a :class:`~turbofeed.base.registry.Registry`
as :data:`KINDS` is (the ``s3`` kind here reads every store's tar shards).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..base.registry import Registry
from ..base.renamed import accepts_renamed
from ..errors import DatasetError
from .arrays.hdf5 import HDF5Source
from .arrays.npy import NpySource, is_sibling
from .arrays.parquet import ParquetSource
from .arrays.tfrecord import TFRecordSource
from .arrays.zarr import ZarrSource, is_zarr_store
from .local.folder import FolderSource
from .local.index import TAR_SUFFIXES
from .local.tar import TarSource
from .paths import INDEX_NAME, PathSpec, expand_local, flat_paths
from .stores.shards import S3Shards
from .stores.families import is_remote
from .stores.urls import resolve_urls
from .source import Source

if TYPE_CHECKING:
    from .stores.config import S3Config


class Opener:
    """What the sources of one dataset are opened with, and what they share: the ``s3://``
    shards' client, node cache and prefetch (made here when ``located`` names any).

    Args:
        located: the ``(kind, path)`` pairs of :func:`resolve`.
        on_damage, cache_dir, format_options, storage, classes, labels: as
            :class:`~turbofeed.io.IndexedDataset` takes them.
    """

    def __init__(self, located: Sequence[tuple[str, str]], *, on_damage: str = "skip",
                 cache_dir: str | None = None, format_options: dict | None = None,
                 storage: S3Config | None = None, classes: list[str] | None = None, labels: bool = True) -> None:
        self.on_damage = on_damage
        self.labels = labels
        self.cache_dir = cache_dir
        self.format_options = format_options
        self.storage = storage
        self.classes = classes
        remote = [path for kind, path in located if kind == "s3"]
        self.shards = S3Shards(remote, config=storage, cache_dir=cache_dir) if remote else None

    def open(self, kind: str, path: str) -> Source:
        """The source of ``path``, which :func:`resolve` found to be ``kind``."""
        return KINDS[kind].open(self, path)

    def close(self) -> None:
        """Stop what the sources share (their own ``close`` is the caller's); idempotent."""
        if self.shards is not None:
            self.shards.close()


def _s3_shard(o: Opener, url: str) -> Source:
    assert o.shards is not None, "an Opener makes the shards of every s3 path it is given"
    return o.shards.open(url, on_damage=o.on_damage, labels=o.labels)  # cached by ETag


@dataclass(frozen=True)
class Format:
    """One kind of source: how its paths are named and how one is opened.

    Attributes:
        name: the ``format=`` value (and the kind :func:`resolve` reports).
        suffixes: file or directory names of this format (lower case).
        open: ``open(opener, path) -> Source``.
        array: an array/table file: recognised alone, or as a flat folder of such files.
    """

    name: str
    suffixes: tuple[str, ...]
    open: Callable[[Opener, str], Source]
    array: bool = False


KINDS: Registry[Format] = Registry("format", (
    Format("tar", TAR_SUFFIXES,  # zstd: named only to be reported
           lambda o, path: TarSource(path, on_damage=o.on_damage, cache_dir=o.cache_dir, labels=o.labels,
                                     storage=o.storage)),
    Format("folder", (), lambda o, path: FolderSource(path, classes=o.classes)),
    Format("hdf5", (".h5", ".hdf5", ".hdf", ".he5"),
           lambda o, path: HDF5Source(path, o.format_options), array=True),
    Format("zarr", (".zarr",), lambda o, path: ZarrSource(path, o.format_options, storage=o.storage), array=True),
    Format("npy", (".npy",), lambda o, path: NpySource(path, o.format_options), array=True),
    Format("parquet", (".parquet", ".pq"), lambda o, path: ParquetSource(path, o.format_options), array=True),
    Format("tfrecord", (".tfrecord", ".tfrec", ".tfrecords"),
           lambda o, path: TFRecordSource(path, o.format_options, cache_dir=o.cache_dir,
                                          on_damage=o.on_damage), array=True),
    Format("s3", TAR_SUFFIXES, _s3_shard),  # found by resolve() for s3:// tar shards, not by name
))
#: The values of ``format=``.
FORMATS = tuple(name for name in KINDS if name != "s3")


def check_format(format: str | None) -> None:
    if format is not None and format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS} or None (by extension), got {format!r}")


def format_of_name(path: str) -> str | None:
    """The format a file or directory name says, or None."""
    lower = os.path.normpath(path).lower()
    for name in FORMATS:
        if KINDS[name].suffixes and lower.endswith(KINDS[name].suffixes):
            return name
    return None


def _data_files(files: list[str], format: str) -> list[tuple[str, str]]:
    return [(format, f) for f in files if f.lower().endswith(KINDS[format].suffixes)
            and not (format == "npy" and is_sibling(os.path.basename(f)))]


def classify_file(path: str, format: str | None = None) -> tuple[str, str]:
    """``(format, path)`` of one file: the ``format`` given, else by its name.

    Raises:
        DatasetError: a directory format for a file, a labels/keys ``.npy``, or a file of
            no known format.
    """
    if os.path.basename(path) == INDEX_NAME:
        raise DatasetError(f"{path}: a turbofeed dataset index, not data: pass the dataset it describes "
                           "(loaders find its index themselves)")
    if format is not None:
        if format in ("folder", "zarr"):
            raise DatasetError(f"{path}: format={format!r} needs a directory, this is a file")
        return format, path
    fmt = format_of_name(path)
    if fmt is not None and KINDS[fmt].array:
        if fmt == "npy" and is_sibling(os.path.basename(path)):
            raise DatasetError(f"{path}: a labels/keys file; pass the images .npy beside it")
        return fmt, path
    if path.endswith(TAR_SUFFIXES):
        return "tar", path
    raise DatasetError(f"{path}: not a .tar shard (or .tar.gz, .tgz, .tar.bz2, .tar.xz), a folder or a "
                       "known array/table file (.h5, .zarr, .npy, .parquet, .tfrecord); pass format=... to say "
                       "what it is")


def expand_dir(path: str, format: str | None = None) -> list[tuple[str, str]]:
    """What a directory holds: a Zarr store; the data files of one format; its tar shards
    (plain or compressed: every one of them, zero-byte ones included, so none is left out
    without a word); else it is an ImageFolder."""
    if format in ("folder", "zarr"):
        return [(format, path)]
    if format is None and (is_zarr_store(path) or format_of_name(path) == "zarr"):
        return [("zarr", path)]
    files = sorted(e.path for e in os.scandir(path) if e.is_file())
    if format is not None:
        found = _data_files(files, format)
        if not found:
            raise DatasetError(f"{path}: no {'/'.join(KINDS[format].suffixes)} files in this folder "
                               f"(format={format!r})")
        return found
    tars = [("tar", f) for f in files if f.endswith(TAR_SUFFIXES)]
    if tars or any(e.is_dir() and not e.name.startswith(".") for e in os.scandir(path)):
        # tar shards, or class folders of an ImageFolder (as before)
        return tars or [("folder", path)]
    for fmt in ("parquet", "hdf5", "npy", "tfrecord"):
        found = _data_files(files, fmt)
        if found:
            return found
    return [("folder", path)]


@accepts_renamed
def resolve(spec: PathSpec, format: str | None = None, *,
            storage: S3Config | None = None) -> list[tuple[str, str]]:
    """Return ``[(kind, path)]`` with kind ``"tar"``, ``"folder"`` or an array/table format
    (``"hdf5"``, ``"zarr"``, ``"npy"``, ``"parquet"``, ``"tfrecord"``: see the module
    docstring), in a stable order (a list's entries may be lists: one dataset's paths
    each, as a mix gives; they are flattened). ``format`` says what every path is instead of its extension.
    ``s3://`` items give kind ``"s3"`` (tar shard URLs, see
    :func:`turbofeed.io.stores.urls.resolve_urls`), reached with ``storage`` (an
    :class:`~turbofeed.io.S3Config`; default: the process default and the AWS variables
    and profile).

    Raises:
        DatasetError: a path is missing, a pattern matches nothing, a file is not a
            tar shard, an S3 object is missing, or nothing was given at all.
    """
    check_format(format)
    items = flat_paths(spec)
    if not items:
        raise DatasetError("no dataset paths given (an empty list)")
    out: list[tuple[str, str]] = []
    for item in items:
        text = os.fspath(item)
        if is_remote(text):
            if text.startswith("s3://") and (format == "zarr" or (format is None and text.rstrip("/").endswith(".zarr"))):
                out.append(("zarr", text.rstrip("/")))  # a Zarr store: read through zarr
                continue
            if format not in (None, "tar"):
                raise DatasetError(f"{text}: object store datasets are WebDataset .tar shards, not {format}")
            out.extend(("s3", url) for url in resolve_urls(text, storage))
            continue
        out.extend(expand_local(text, lambda path: expand_dir(path, format) if os.path.isdir(path)
                                else [classify_file(path, format)]))
    return out
