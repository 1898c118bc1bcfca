"""Sources: tar shards (indexed), image folders, HDF5, Zarr, .npy and Parquet; the dataset
that joins them."""

from .dataset import Dataset
from ..errors import MissingExtra
from .folder import FolderSource
from .formats import FORMATS
from .hdf5 import HDF5Source
from .npy import NpySource
from .parquet import ParquetSource
from .paths import PathSpec, expand_braces, resolve
from .s3config import S3Config
from .source import Source
from .table import SampleTable, parse_label, split_key
from .tar import TarSource, default_cache_dir, load_index
from .zarr_store import ZarrSource

__all__ = [
    "Dataset", "FORMATS", "FolderSource", "HDF5Source", "MissingExtra", "NpySource", "ParquetSource",
    "PathSpec", "S3Config", "SampleTable", "Source", "TarSource", "ZarrSource", "default_cache_dir",
    "expand_braces", "load_index", "parse_label", "resolve", "split_key",
]
