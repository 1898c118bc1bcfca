"""What the array and table sources (HDF5, Zarr, .npy, Parquet) share: options, checks,
labels and keys, and block-wise reads through the shared block cache.

Conventions (each name can be changed with ``format_options``):

=========  =====================================================================
images     ``(N, H, W[, C])`` uint8 pixels (C = 1, 3 or 4), or N encoded images
           (variable-length bytes, a Parquet binary column or ``{bytes, path}``
           struct as Hugging Face exports it)
labels     N integers or class names; missing -> unlabelled (-1)
keys       N sample keys; missing -> the row number, ``f"{row:08d}"``, which is
           the key ``turbofeed make-dataset`` and ``convert`` give row ``row``
=========  =====================================================================
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any, Literal, overload

import numpy as np

from ...errors import DatasetError
from ..table import Label, SampleTable
from .blocks import BLOCKS, io_counts

#: format_options every array source understands; each source documents the rest.
OPTIONS = {
    "images": "name of the images dataset/array/column",
    "labels": "name of the labels dataset/array/column, or None for no labels",
    "keys": "name of the sample keys dataset/array/column, or None for row numbers",
    "mmap": "HDF5: map contiguous uncompressed images straight from the file (default True)",
}
AUTO = object()  # "look for the conventional names"


def parse_options(options: dict | None) -> dict[str, Any]:
    """Check ``format_options``: unknown names are an error, so a typo never goes unnoticed.

    Raises:
        ValueError: an unknown option, naming the known ones.
    """
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        known = ", ".join(f"{k!r} ({v})" for k, v in OPTIONS.items())
        raise ValueError(f"unknown format_options {unknown}; known: {known}")
    return {name: options.get(name, AUTO) for name in OPTIONS}


def listing(names: Sequence[str], limit: int = 12) -> str:
    """``'a', 'b', 'c'`` (or ``nothing``), at most ``limit`` names."""
    names = list(names)
    if not names:
        return "nothing"
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


@overload
def pick_name(path: str, wanted: Any, candidates: Sequence[str], available: Container[str], what: str,
              *, required: Literal[True], option: str,
              described: Callable[[], Sequence[str]] | None = None) -> str: ...
@overload
def pick_name(path: str, wanted: Any, candidates: Sequence[str], available: Container[str], what: str,
              *, required: bool, option: str,
              described: Callable[[], Sequence[str]] | None = None) -> str | None: ...
def pick_name(path: str, wanted: Any, candidates: Sequence[str], available: Container[str], what: str,
              *, required: bool, option: str,
              described: Callable[[], Sequence[str]] | None = None) -> str | None:
    """The member to use: the one asked for (which must exist), else the first conventional
    name that exists, else None (or an error naming what exists when ``required``; a
    required member cannot be turned off with None).

    ``available`` only needs ``in``; ``described()`` lists what exists, for the message.
    """
    if wanted is None:
        if required:
            raise DatasetError(f"{path}: format_options {option!r} cannot be None: the {what} is required")
        return None

    def has() -> str:
        if described is not None:
            return listing(described())
        return listing(list(available) if isinstance(available, Iterable) else [])
    if wanted is not AUTO:
        if wanted not in available:
            raise DatasetError(f"{path}: no {what} {wanted!r} (has {has()})")
        return wanted
    for name in candidates:
        if name in available:
            return name
    if required:
        raise DatasetError(f"{path}: no {what} named {listing(candidates)} (has {has()}); name "
                           f"yours with format_options={{{option!r}: ...}}")
    return None


def check_pixels(path: str, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """Raise a DatasetError unless ``(N, H, W[, 1|3|4])`` uint8."""
    if np.dtype(dtype) != np.uint8:
        raise DatasetError(f"{path}: {name!r} has dtype {np.dtype(dtype)}; turbofeed reads uint8 pixels "
                           "(N, H, W[, C]) or encoded image bytes")
    if len(shape) not in (3, 4) or (len(shape) == 4 and shape[3] not in (1, 3, 4)):
        raise DatasetError(f"{path}: {name!r} has shape {tuple(shape)}; images are (N, H, W) or "
                           "(N, H, W, C) with C = 1, 3 or 4")


def as_labels(path: str, name: str, values: Any, count: int) -> list[Label]:
    """Labels as a list of int / class name / None, checked to number ``count``.

    Raises:
        DatasetError: wrong length or a label that is neither an integer nor a name.
    """
    values = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if len(values) != count:
        raise DatasetError(f"{path}: {name!r} has {len(values)} labels for {count} images")
    out: list[Label] = []
    for i, v in enumerate(values):
        if isinstance(v, list) and len(v) == 1:  # (N, 1) arrays
            v = v[0]
        if isinstance(v, bytes):
            v = v.decode("utf-8")
        if v == "":  # an empty class name: no label
            v = None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
            raise DatasetError(f"{path}: {name!r}[{i}] = {v!r} is neither an integer label nor a "
                               "class name")
        out.append(v)
    return out


def as_keys(path: str, name: str | None, values: Any, count: int) -> list[str]:
    """Sample keys as strings; the row numbers ``f"{row:08d}"`` when ``name`` is None."""
    if name is None:
        return [f"{i:08d}" for i in range(count)]
    values = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if len(values) != count:
        raise DatasetError(f"{path}: {name!r} has {len(values)} keys for {count} images")
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


def make_table(keys: list[str], labels: list[Label] | None, image_name: str,
               sample_nbytes: int = -1) -> SampleTable:
    """A SampleTable for ``len(keys)`` rows; image names read ``images[row]``."""
    n = len(keys)
    return SampleTable(keys=keys, image_names=[f"{image_name}[{i}]" for i in range(n)],
                       offsets=np.arange(n, dtype=np.int64),
                       sizes=np.full(n, sample_nbytes, dtype=np.int64),
                       labels=labels if labels is not None else [None] * n)


class BlockReads:
    """Read samples block by block through the shared :data:`BLOCKS` cache.

    Args:
        owner: the source (its id keys the cache entries).
        starts: first row of each block, plus the total row count at the end.
        load: ``load(block) -> (rows, nbytes)``, ``rows`` indexable by row-in-block.
        item: turns ``rows[j]`` into what ``read`` returns (default: a copy of the row,
            so no sample keeps a whole evicted block alive).
    """

    _ids = itertools.count()

    def __init__(self, starts: np.ndarray, load: Callable[[int], tuple[Any, int]],
                 item: Callable[[Any, int], Any] | None = None) -> None:
        self.starts = np.asarray(starts, dtype=np.int64)
        self._start_list = self.starts.tolist()  # bisect: np.searchsorted costs ~5 us per call
        self._load = load
        self._item = item or (lambda rows, j: np.array(rows[j]))
        self._owner = ("blocks", next(self._ids))
        self.counts = io_counts()

    @classmethod
    def uniform(cls, count: int, rows: int, load_rows: Callable[[int, int], tuple[Any, int]],
                item: Callable[[Any, int], Any] | None = None) -> "BlockReads":
        """Blocks of ``rows`` rows each; ``load_rows(start, stop)``."""
        starts = np.append(np.arange(0, count, rows, dtype=np.int64), count)
        return cls(starts, lambda b: load_rows(int(starts[b]), int(starts[b + 1])), item)

    @property
    def blocks(self) -> int:
        return len(self.starts) - 1

    def read(self, i: int) -> Any:
        b = bisect.bisect_right(self._start_list, i) - 1
        rows = BLOCKS.get((self._owner, b), lambda: self._load(b), self.counts)
        self.counts.add("samples")
        return self._item(rows, i - self._start_list[b])

    def stats(self) -> dict[str, Any]:
        """Block count and the cache counters, for a source's ``io_stats``."""
        return {"blocks": self.blocks, **self.counts.as_dict()}

    def close(self) -> None:
        BLOCKS.drop(self._owner)


def rereads_warning(path: str, name: str, rows_per_block: float, data_bytes: int) -> str | None:
    """A note when a shuffled epoch will load blocks more than once, or None.

    With blocks of ``r`` samples and a cache holding a fraction ``f`` of the data, a
    shuffled epoch loads about ``r * (1 - f)`` times the data (each sample read misses
    with probability ``1 - f`` and a miss loads ``r`` samples).
    """
    if rows_per_block <= 1 or data_bytes <= BLOCKS.budget:
        return None
    factor = rows_per_block * (1 - BLOCKS.budget / data_bytes)
    return (f"{path}: {name!r} is stored in blocks of {rows_per_block:g} samples and is "
            f"{data_bytes / 2**20:.0f} MiB, more than the {BLOCKS.budget / 2**20:.0f} MiB block cache "
            f"($TURBOFEED_BLOCK_CACHE_MB): a shuffled epoch will read about {factor:.1f}x the data. "
            "Store one sample per chunk/row group, or raise the cache.")
