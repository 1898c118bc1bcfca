"""Pieces of shards: runs of consecutive samples of one shard that a streamed epoch fetches,
caches and orders as units of their own, so that a node cache of a few shards' bytes holds
samples of many more shards at once (issue 29). Pure arithmetic on the dataset index.

A shard of 250 samples (23 MB) cut with ``piece_bytes`` of 8 MiB::

    samples       0 ........ 124 | 125 ....... 249          (2 pieces: 23 MB // 8 MiB)
    bytes         [lo_0,   hi_0) | [lo_1,   hi_1)           lo: first member's offset of the
                                                            first sample; hi: end of the last
                                                            sample's last member

A piece is never smaller than ``piece_bytes`` nor than ``min_samples`` samples (a shard
too small for two is one piece: the whole shard), and a shard whose members' offsets are
unknown (no member table) or that is read from a decompressed copy stays whole. The cut is
a pure function of the index and ``piece_bytes``, so every rank of every node, and a
resumed run, cuts the same pieces (and names the same node-cache entries).

:func:`split_visits` turns an epoch's shard visits (:class:`~turbofeed.plan.mixing.ShardVisits`:
every shard once, weighted or resampled draws) into piece visits, which
:func:`turbofeed.plan.streaming.stream_blocks` then orders as it orders shards: pieces
permuted, cut into blocks that fit the block size, mixed over ``overlap`` blocks.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from .mixing import ShardVisits


@dataclass(frozen=True)
class Pieces:
    """The pieces of a dataset's shards, in shard order.

    Attributes:
        starts: int64 ``[P + 1]``: piece ``p`` holds sample ids ``starts[p] .. starts[p+1]-1``
            (a refinement of the shards' ``starts``: every shard boundary is a piece boundary).
        shard: int64 ``[P]``: the shard of each piece.
        lo, hi: int64 ``[P]``: the bytes ``[lo, hi)`` of its shard that the piece's samples'
            members lie in (``0, size`` for a whole shard).
        whole: bool ``[P]``: the piece is its whole shard (cached as the shard itself).
    """

    starts: np.ndarray
    shard: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    whole: np.ndarray
    # for :meth:`holding`, once per read of a sample: plain lists (bisect is ~10x numpy's cost here)
    _first: list[int] = field(init=False, repr=False, compare=False)
    _lo: list[int] = field(init=False, repr=False, compare=False)
    _hi: list[int] = field(init=False, repr=False, compare=False)
    _whole: list[bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shards = int(self.shard[-1]) + 1 if len(self.shard) else 0
        object.__setattr__(self, "_first", np.searchsorted(self.shard, np.arange(shards + 1)).tolist())
        object.__setattr__(self, "_lo", np.asarray(self.lo).tolist())
        object.__setattr__(self, "_hi", np.asarray(self.hi).tolist())
        object.__setattr__(self, "_whole", np.asarray(self.whole).tolist())

    def __len__(self) -> int:
        return len(self.shard)

    @property
    def nbytes(self) -> np.ndarray:
        """int64 bytes of each piece (what the node cache holds for it)."""
        return self.hi - self.lo

    @staticmethod
    def whole_shards(starts: np.ndarray, sizes: np.ndarray | list[int]) -> Pieces:
        """Every shard one piece, whole (``sizes``: each shard's bytes)."""
        sizes = np.asarray(sizes, dtype=np.int64)
        return Pieces(starts=np.asarray(starts, dtype=np.int64), shard=np.arange(len(sizes), dtype=np.int64),
                      lo=np.zeros_like(sizes), hi=sizes, whole=np.ones(len(sizes), bool))

    def holding(self, shard: int, offset: int, size: int) -> int | None:
        """The piece of ``shard`` whose bytes hold ``[offset, offset + size)``, or None."""
        if shard + 1 >= len(self._first):
            return None
        a, b = self._first[shard], self._first[shard + 1]
        if b - a == 1 and self._whole[a]:
            return a
        k = bisect_right(self._lo, offset, a, b) - 1
        if k < a or offset + size > self._hi[k]:
            return None
        return k


def cut_shard(lo: np.ndarray, hi: np.ndarray, shard_bytes: int, piece_bytes: int, min_samples: int) -> np.ndarray:
    """Where to cut one shard: int64 sample indices ``0 = c_0 < c_1 < .. < c_n = len(lo)``,
    piece ``j`` holding samples ``c_j .. c_{j+1}-1``.

    Args:
        lo, hi: int64, each sample's first member offset and its last member's end.
        shard_bytes: the shard's size (a piece count of ``shard_bytes // piece_bytes``).
        piece_bytes: the least bytes of a piece (0: the shard whole).
        min_samples: the fewest samples of a piece.

    The ``n = min(shard_bytes // piece_bytes, len // min_samples)`` pieces hold about
    equal bytes: a cut falls at the first sample starting past ``j / n`` of the bytes.
    """
    count = len(lo)
    if piece_bytes <= 0 or count == 0:
        return np.asarray([0, count], dtype=np.int64)
    n = int(min(shard_bytes // piece_bytes, count // max(min_samples, 1)))
    if n < 2:
        return np.asarray([0, count], dtype=np.int64)
    first, span = int(lo[0]), max(int(hi.max()) - int(lo[0]), 1)
    marks = first + (np.arange(1, n, dtype=np.int64) * span) // n
    cuts = np.searchsorted(lo, marks, side="left")
    cuts = np.unique(np.clip(cuts, 1, count - 1))
    return np.concatenate([[0], cuts, [count]]).astype(np.int64)


def split_visits(visits: ShardVisits, pieces: Pieces) -> ShardVisits:
    """The same samples, in the same order, as visits of pieces: a shard visit becomes one
    visit per piece it reads (its ids are sorted, so each piece's are consecutive).
    ``ShardVisits.shard`` then holds piece numbers. Whole shards give the visits back as
    they were (the same arrays, so the draws made from them are too)."""
    if not len(pieces) or len(pieces) == int(pieces.shard[-1]) + 1:
        return visits  # one piece per shard: piece k is shard k, nothing to split
    ids = visits.ids
    piece = np.searchsorted(pieces.starts, ids, side="right") - 1
    visit_starts = np.zeros(len(ids), dtype=bool)
    visit_starts[visits.start[:-1][visits.start[:-1] < len(ids)]] = True
    change = np.ones(len(ids), dtype=bool)
    if len(ids):
        change[1:] = (piece[1:] != piece[:-1]) | visit_starts[1:]
    first = np.flatnonzero(change).astype(np.int64)
    return ShardVisits(shard=piece[first].astype(np.int64),
                       start=np.concatenate([first, [len(ids)]]).astype(np.int64), ids=ids)


def cut_pieces(starts: np.ndarray, shard_bytes: np.ndarray, spans: list[tuple[np.ndarray, np.ndarray] | None],
               piece_bytes: int, min_samples: int) -> Pieces:
    """The pieces of every shard (:func:`cut_shard`).

    Args:
        starts: int64 ``[K + 1]``: shard ``k`` holds sample ids ``starts[k] .. starts[k+1]-1``.
        shard_bytes: each shard's size.
        spans: per shard, its samples' ``(lo, hi)`` byte spans (int64), or None to keep it
            whole (no member offsets; read from a decompressed copy).
        piece_bytes, min_samples: as for :func:`cut_shard`.
    """
    starts = np.asarray(starts, dtype=np.int64)
    bounds, shard, lo, hi, whole = [np.zeros(1, np.int64)], [], [], [], []
    for k, span in enumerate(spans):
        size = int(shard_bytes[k])
        count = int(starts[k + 1] - starts[k])
        cuts = np.asarray([0, count], np.int64) if span is None else cut_shard(*span, size, piece_bytes, min_samples)
        n = len(cuts) - 1
        bounds.append(starts[k] + cuts[1:])
        shard.append(np.full(n, k, dtype=np.int64))
        if n == 1:
            lo.append(np.zeros(1, np.int64))
            hi.append(np.full(1, size, np.int64))
            whole.append(np.ones(1, bool))
            continue
        s_lo, s_hi = span  # type: ignore[misc]
        lo.append(np.minimum.reduceat(s_lo, cuts[:-1]).astype(np.int64))
        hi.append(np.maximum.reduceat(s_hi, cuts[:-1]).astype(np.int64))
        whole.append(np.zeros(n, bool))
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    return Pieces(starts=cat(bounds, np.int64), shard=cat(shard, np.int64), lo=cat(lo, np.int64),
                  hi=cat(hi, np.int64), whole=cat(whole, bool))
