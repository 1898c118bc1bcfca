"""Streaming mode's choices: when a pass streams, its order's layout, and its fetch stage.

Streaming (see ``docs/streaming.md``) is on when asked (``streaming=True``) or, by
default, when the dataset's ``s3://`` shards add up to more than the node cache holds.
Its order is :func:`turbofeed.plan.streaming.stream_order` over a
:class:`~turbofeed.plan.streaming.StreamLayout` made here; its fetch stage is
:class:`turbofeed.io.s3.stream.ShardStream` (shards downloaded whole ahead of their
block, held until their last sample is read).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import numpy as np

from ..plan import EpochPlan
from ..plan.streaming import StreamLayout

if TYPE_CHECKING:
    from ..io import Dataset
    from .run import FetchAhead

log = logging.getLogger("turbofeed")

#: Block size when there is no node cache to size it by (local shards streamed on request).
LOCAL_BLOCK_BYTES = 4 << 30


def shard_bytes(dataset: Dataset) -> np.ndarray:
    """Bytes of each source: an ``s3://`` object's size, a local file's size, else the
    sum of its samples' sizes."""
    sizes = []
    for src in dataset.sources:
        info = getattr(src, "info", None)
        if info is not None and hasattr(info, "size"):
            sizes.append(int(info.size))
        elif os.path.isfile(src.path):
            sizes.append(os.path.getsize(src.path))
        else:
            sizes.append(int(np.clip(src.table.sizes, 0, None).sum()))
    return np.asarray(sizes, dtype=np.int64)


def stream_layout(dataset: Dataset, streaming: bool | None, *, nodes: int, ranks_per_node: int,
                  canonical_nodes: int | None = None, block_bytes: int | None = None) -> StreamLayout | None:
    """The layout of a streamed order, or None when the pass reads the plain order.

    ``streaming=None`` streams exactly when the ``s3://`` shards do not fit the node cache
    but two of the largest do (logged). The blocks hold half the cache per stream a node
    reads, so the block being read and the next one fit together.
    """
    nbytes = shard_bytes(dataset)
    cache = None if dataset.s3 is None else dataset.s3.cache.max_bytes
    too_small = cache is not None and len(nbytes) > 0 and cache < 2 * int(nbytes.max())
    if too_small and streaming is not False and int(nbytes.sum()) > cache:  # type: ignore[operator]
        log.warning("turbofeed: the node cache (%d bytes) cannot hold two of the largest s3:// shards "
                    "(%d bytes each)%s; raise S3Config.cache_max_bytes to stream them", cache,
                    int(nbytes.max()), ": they are read sample by sample with ranged GETs"
                    if streaming is None else ": those it has no room for are read with ranged GETs")
    if streaming is None:
        streaming = cache is not None and int(nbytes.sum()) > cache and not too_small
        if streaming:
            log.info("turbofeed: the s3:// shards (%d bytes) exceed the node cache (%d bytes): streaming "
                     "them block by block (streaming=False reads them sample by sample instead)",
                     int(nbytes.sum()), cache)
    if not streaming:
        return None
    canonical = canonical_nodes or nodes
    if block_bytes is None:
        block_bytes = LOCAL_BLOCK_BYTES if cache is None else max(1, cache * nodes // (2 * canonical))
    return StreamLayout(starts=dataset.starts, shard_bytes=nbytes, canonical_nodes=canonical,
                        block_bytes=int(block_bytes), ranks_per_node=ranks_per_node)


def fetch_stage(dataset: Dataset, plan: EpochPlan, layout: StreamLayout | None) -> FetchAhead | None:
    """The fetch stage of a streamed pass over ``s3://`` shards (None otherwise)."""
    if layout is None or dataset.s3 is None:
        return None
    from ..io.s3.stream import stream_shards

    return stream_shards(dataset.s3, dataset.sources, dataset.starts, plan.order,
                         concurrency=max(2, dataset.s3.config.prefetch_shards))
