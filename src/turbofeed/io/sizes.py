"""Every sample's image size (height, width), for aspect-ratio buckets.

Tar shards described by the dataset index (:mod:`turbofeed.io.dsindex`) have them
already: the index reads each image's header when it reads the shard. Other local
sources (image folders, shards the index does not describe: compressed ones,
HDF5/Zarr/.npy/Parquet/TFRecord) are probed here, once, when a loader
with buckets is built: each image's first bytes read
(:meth:`~turbofeed.io.source.Source.head`) and its header parsed (no pixel decoded), one
info line saying how many. ``s3://`` shards without an index are refused (probing them
would download each): ``turbofeed index PREFIX`` writes their index, sizes included.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from ..decode.probe import HEAD_BYTES, MORE_BYTES, probe_size
from ..errors import DatasetError

if TYPE_CHECKING:
    from .dataset import IndexedDataset
    from .source import Source

log = logging.getLogger("turbofeed")


def image_sizes(dataset: IndexedDataset) -> tuple[np.ndarray, np.ndarray]:
    """``(heights, widths)``: int64 arrays of ``len(dataset)``, one per global sample id,
    0 where a sample has no readable image header (a bad sample, met as one when loaded).

    Raises:
        DatasetError: an ``s3://`` source the dataset index does not describe.
    """
    heights, widths = [], []
    probed, started = 0, time.perf_counter()
    for source in dataset.sources:
        table = source.table
        if table.heights is not None and table.widths is not None:
            heights.append(np.asarray(table.heights, np.int64))
            widths.append(np.asarray(table.widths, np.int64))
            continue
        if "://" in source.path:
            raise DatasetError(f"{source.path}: buckets need each image's size, which the dataset index holds; "
                               f"none describes this shard: write it with `turbofeed index PREFIX`")
        h, w = _probe(source)
        heights.append(h)
        widths.append(w)
        probed += len(h)
    if probed:
        log.info("turbofeed: read the image size of %d samples the dataset index does not describe in %.2f s",
                 probed, time.perf_counter() - started)
    empty = np.zeros(0, np.int64)
    return (np.concatenate(heights) if heights else empty), (np.concatenate(widths) if widths else empty)


def _probe(source: Source) -> tuple[np.ndarray, np.ndarray]:
    """Each sample's size, read from its bytes' header (0 where there is none)."""
    n = len(source.table)
    h, w = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):
        head = source.head(i, HEAD_BYTES)  # a storage fault raises, as on every path
        if isinstance(head, np.ndarray):  # a decoded array sample (HDF5, Zarr, .npy)
            if head.ndim in (2, 3):
                h[i], w[i] = head.shape[:2]
            continue
        h[i], w[i] = probe_size(_Heads(source, i, head).read, len(head) if len(head) < HEAD_BYTES else MORE_BYTES)
    return h, w


class _Heads:
    """Sample ``i``'s first bytes as :func:`probe_size` asks for them: from the ``head``
    read already, more only when a header lies past it (large EXIF or ICC segments)."""

    def __init__(self, source: Source, i: int, head: bytes) -> None:
        self.source, self.i, self.head = source, i, head

    def read(self, n: int) -> bytes:
        if n <= len(self.head):
            return self.head[:n]
        more = self.source.head(self.i, n)
        return more if isinstance(more, bytes) else bytes(more)
