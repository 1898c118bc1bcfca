"""Sources: tar shards (indexed), image folders; the dataset that joins them."""

from .dataset import Dataset
from .folder import FolderSource
from .paths import expand_braces, resolve
from .source import Source
from .table import SampleTable, parse_label, split_key
from .tar import TarSource, default_cache_dir, load_index

__all__ = sorted([
    "Dataset", "FolderSource", "SampleTable", "Source", "TarSource", "default_cache_dir",
    "expand_braces", "load_index", "parse_label", "resolve", "split_key",
])
