"""The overlapping-window shuffle of one streamed stream: each stretch of the stream draws
its samples from ``overlap`` consecutive blocks at once, not from one, so a batch mixes the
shards of several blocks while the node cache still holds a bounded number of them.
Pure arithmetic, like :mod:`turbofeed.plan.streaming`, which calls it.

A stream cut into blocks ``0 .. n-1`` (whole shards, at most ``block_bytes`` each) is
reordered into segments ``0 .. n-1``: every sample of block ``b`` goes to segment
``max(0, b - r)``, ``r`` drawn uniformly from ``0 .. overlap-1``; segments follow each
other and the samples of a segment are permuted. With ``overlap = 3``::

    block       0        1        2        3        4
    segment 0   0 1 2 (block 0 whole, most of 1, a third of 2)
    segment 1            1 2 3
    segment 2                     2 3 4
    segment 3                              3 4
    segment 4                                       4     (the end of a pass: in segment 2)

Block ``b`` is read from the start of segment ``b - overlap + 1`` to the end of segment
``b``, so a position in segment ``s`` reads blocks ``s .. s + overlap - 1`` only:
``overlap`` blocks held at once, plus the next one downloaded ahead, never more than
``overlap + 1`` blocks (the fetch stage's reads may run a segment ahead of the batches
done; the layout sizes the blocks so that ``overlap + 1`` of them fit the cache). This is
the idea of Mosaic Streaming's ``py1e`` shuffle (each shard's samples spread over a
range overlapping its neighbours'), in whole segments so that the bound is exact.

``overlap = 1`` is the plain block shuffle (samples permuted inside one block), which
:func:`turbofeed.plan.streaming.stream_blocks` computes itself, unchanged.
"""

from __future__ import annotations

import numpy as np


def overlap_order(block: np.ndarray, overlap: int, rng: np.random.Generator, *, last: bool = True) -> np.ndarray:
    """The permutation that puts one stream in overlapping-window order.

    Args:
        block: int64, the block of each element of the stream in stream order
            (consecutive numbers, non-decreasing; only differences from the first count).
        overlap: blocks a segment draws from (>= 1).
        rng: the plan's generator (draws ``2 * len(block)`` numbers).
        last: the stream ends the pass: its last segment (``n - overlap``) takes what
            the later ones would, so the end mixes ``overlap`` blocks as the rest does.
            False for a resampled epoch's round (:mod:`turbofeed.plan.stream_rounds`):
            the next round's first segment holds ``overlap`` blocks already, so the
            round's tail thins out to one block instead, keeping ``overlap + 1`` the most.

    Returns:
        int64 indices into ``block``: element ``i`` of the reordered stream is element
        ``perm[i]`` of the stream.
    """
    if overlap < 1:
        raise ValueError(f"overlap must be >= 1, got {overlap}")
    n = len(block)
    if not n:
        return np.zeros(0, dtype=np.int64)
    local = np.asarray(block, dtype=np.int64) - int(block[0])
    back = rng.integers(0, overlap, size=n)
    segment = np.maximum(local - back, 0)
    if last:
        segment = np.minimum(segment, max(int(local[-1]) + 1 - overlap, 0))
    tiebreak = rng.random(n)
    return np.lexsort((tiebreak, segment)).astype(np.int64)  # by segment, then at random
