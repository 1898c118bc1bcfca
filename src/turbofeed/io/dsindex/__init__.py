"""The compact dataset index (issue #17): one file describing every tar shard of a
dataset (per-shard identity, counts, problems and damage; per sample its key, image
member, raw label and every member's extension, offset and size) as numpy arrays that
loaders map instead of indexing each shard.

:class:`~turbofeed.io.IndexedDataset` finds it (:func:`find_index`), builds it for local tar
shards when it is missing or shards changed (:mod:`.auto`, one process per node under a
file lock, :mod:`.lock`), and takes from it every shard that is still the version it
indexed; ``turbofeed index DATA`` writes it ahead of time, and for ``s3://`` data
(:func:`build_index`). See docs/index.md.

Modules: :mod:`.fileformat` (the file), :mod:`.parts` (one shard's arrays, the whole
index's), :mod:`.build` (``turbofeed index``), :mod:`.auto` and :mod:`.lock` (built by
loaders; in memory for ``index=False``: :func:`memory_index`), :mod:`.where` (where it is
written and looked up), :mod:`.find`, :mod:`.load` (a mapped index and its sources).
"""

from ..paths import INDEX_NAME
from .auto import memory_index
from .build import IndexSummary, build_index
from .find import find_index, open_index
from .load import DatasetIndex

__all__ = ["DatasetIndex", "INDEX_NAME", "IndexSummary", "build_index", "find_index", "memory_index", "open_index"]
