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
"""

from ..errors import MissingExtra
from .arrays.hdf5 import HDF5Source
from .arrays.npy import NpySource
from .arrays.parquet import ParquetSource
from .arrays.tfrecord import TFRecordSource
from .arrays.zarr import ZarrSource
from .dataset import Dataset
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
    "AzureConfig", "Dataset", "DatasetIndex", "FORMATS", "FolderSource", "GCSConfig", "HDF5Source", "HTTPConfig",
    "IndexSummary", "MissingExtra",
    "NpySource", "ParquetSource", "PathSpec", "S3Config", "SampleTable", "Source", "TFRecordSource", "TarSource",
    "ZarrSource", "build_index", "default_cache_dir", "expand_braces", "load_index", "parse_label", "pick_member",
    "resolve", "split_key",
]
