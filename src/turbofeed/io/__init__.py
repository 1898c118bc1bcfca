"""Sources: tar shards (indexed), image folders, HDF5, Zarr, .npy, Parquet and TFRecord, ``s3://``
shards; the dataset that joins them.

Layout: :mod:`.source` (the protocol every source implements), :mod:`.registry` (which
format a path holds, and the one factory that opens its source), :mod:`.dataset`;
``local/`` (tar shards and their index, folders, open files, writing shards),
``arrays/`` (HDF5, Zarr, .npy, Parquet, TFRecord and the block cache), ``stores/`` (the
object stores, S3, GCS, Azure and https: client, URLs, node cache, shards, streaming),
``dsindex/`` (the compact dataset index, built by the first loader
or ``turbofeed index``). ``load_index`` (one plain tar shard's index, read from its headers)
stays for callers of the per-shard index, which is no longer cached. Other
packages import only the names below.

:class:`IndexedDataset` (the *opened* dataset) was ``turbofeed.io.Dataset``, a name that
collided with the public :class:`turbofeed.Dataset` (the description a loader opens,
issue 38); the old name still works for one release, with a ``DeprecationWarning``.
"""

import sys as _sys
import typing as _typing
import warnings as _warnings

from ..errors import MissingExtra
from .arrays.hdf5 import HDF5Source
from .arrays.npy import NpySource
from .arrays.parquet import ParquetSource
from .arrays.tfrecord import TFRecordSource
from .arrays.zarr import ZarrSource
from .dataset import IndexedDataset
from .dsindex import DatasetIndex, IndexSummary, build_index
from .local.folder import FolderSource
from .local.index import default_cache_dir, load_index
from .local.tar import TarSource
from .paths import PathSpec, expand_braces
from .registry import FORMATS, resolve
from .stores.config import S3Config
from .stores.families import AzureConfig, GCSConfig, HTTPConfig
from .source import Source
from .table import SampleTable, parse_label, pick_member, split_key

__all__ = [
    "AzureConfig", "DatasetIndex", "FORMATS", "FolderSource", "GCSConfig", "HDF5Source", "HTTPConfig",
    "IndexSummary", "IndexedDataset", "MissingExtra",
    "NpySource", "ParquetSource", "PathSpec", "S3Config", "SampleTable", "Source", "TFRecordSource", "TarSource",
    "ZarrSource", "build_index", "default_cache_dir", "expand_braces", "load_index", "parse_label", "pick_member",
    "resolve", "split_key",
]

#: Old name -> its new name in this package, each kept for one release.
_RENAMED = {"Dataset": "IndexedDataset"}

if not _typing.TYPE_CHECKING:  # type checkers flag the old name (a misspelt one stays an error, not Any)
    def __getattr__(name: str):
        """An old name of :data:`_RENAMED`: the very class of the new name, with one
        ``DeprecationWarning`` per use pointing at the user's line (PEP 562)."""
        new = _RENAMED.get(name)
        if new is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        if _sys._getframe(1).f_code.co_name == "_handle_fromlist":  # `from turbofeed.io import Dataset` asks
            return globals()[new]  # twice, first here (is it a submodule?): the warning comes once, below
        # stacklevel 2: the line that reads the name (the import machinery's frames are skipped)
        _warnings.warn(f"{__name__}.{name} is now {__name__}.{new} (the opened dataset; turbofeed.{name} is the "
                       f"description a loader opens): use {__name__}.{new}; the old name goes in the next release",
                       DeprecationWarning, stacklevel=2)
        return globals()[new]
