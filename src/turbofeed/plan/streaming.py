"""The order of a streamed epoch: a two-level shuffle over shards that do not all fit the
node cache, split so that the nodes read disjoint shards. Pure functions, like
:mod:`turbofeed.plan.order`.

Example: 6 shards ``A..F`` of 4 samples, ``canonical_nodes=2``, blocks of 2 shards::

    1. shard order, permuted per epoch     C A F B E D
    2. cut into 2 canonical streams        stream 0: C A F (12 samples)  stream 1: B E D
       (contiguous, lengths differ <= 1)
    3. each stream cut into blocks of      stream 0: [C A] [F]           stream 1: [B E] [D]
       whole shards that fit block_bytes
    4. samples permuted inside a block     stream 0: a2 c0 a1 c3 c1 a0 c2 a3 | f1 f3 f0 f2
       (``overlap`` > 1: each stretch of a stream mixes that many consecutive blocks,
       :mod:`turbofeed.plan.overlap`)
    5. streams interleaved: position p of  G = s0[0] s1[0] s0[1] s1[1] ...  (G[p] is from stream p % 2)
       the global order G is from stream
       ``p % canonical_nodes``

Ranks take positions of ``G`` strided, as in :func:`turbofeed.plan.order.rank_order`,
except that the rank with node ``n`` and local rank ``l`` takes the residue
``l * nodes + n`` (mod the world size): every position it takes is then from a stream
``≡ n (mod nodes)``, so the nodes read disjoint streams, hence disjoint shards (up to
the ``canonical_nodes - 1`` shards cut between two streams), and the ranks of a node read
the same blocks at the same time, sharing the node's downloads. With 2 nodes of 2 ranks::

    position p      0   1   2   3   4   5   6   7
    stream p % 2    0   1   0   1   0   1   0   1
    residue p % 4   0   1   2   3   0   1   2   3
    takes it        n0l0 n1l0 n0l1 n1l1 ...            (residue l * 2 + n)

``samples_done`` stays a prefix of ``G`` (any ``W`` consecutive positions hold each
residue once), so resume is exact, and elastic for any world size whose node count
divides ``canonical_nodes``: the order is fixed by the canonical nodes, not by the
machines reading it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mixing import ShardVisits, draw_epoch
from .overlap import overlap_order
from .pieces import Pieces, split_visits

_TAG = 0x5354  # "ST": keeps these draws apart from the other uses of (seed, epoch)


@dataclass(frozen=True)
class StreamLayout:
    """What a streamed order depends on besides (seed, epoch, shuffle), and how ranks sit
    on nodes.

    Attributes:
        starts: int64 ``[K + 1]``: shard ``k`` holds sample ids ``starts[k] .. starts[k+1]-1``.
        shard_bytes: bytes of each shard.
        canonical_nodes: streams the order is cut into (the node count of the run that
            started it; a resumed run's node count must divide it).
        block_bytes: the most bytes of shards in one block.
        ranks_per_node: ranks sharing one node (and its cache); ranks are numbered node
            by node.
        overlap: blocks each stretch of a stream draws its samples from
            (:mod:`turbofeed.plan.overlap`); 1: samples mixed inside one block only.
        piece_bytes: the least bytes of a piece of a shard (:mod:`turbofeed.plan.pieces`);
            0: shards are ordered, fetched and held whole.
        pieces: the cut that ``piece_bytes`` gives this dataset (None with 0): the order's
            units instead of whole shards.
    """

    starts: np.ndarray
    shard_bytes: np.ndarray
    canonical_nodes: int
    block_bytes: int
    ranks_per_node: int = 1
    overlap: int = 1
    piece_bytes: int = 0
    pieces: Pieces | None = None

    def state(self) -> dict:
        """The fields a resume state keeps so that the resumed order is the same (a state
        without ``overlap`` or ``piece_bytes``, saved before they existed, resumes with 1
        and 0: the order it had)."""
        return {"canonical_nodes": int(self.canonical_nodes), "block_bytes": int(self.block_bytes),
                "overlap": int(self.overlap), "piece_bytes": int(self.piece_bytes)}


def stream_order(starts: np.ndarray, shard_bytes: np.ndarray, *, seed: int, epoch: int, shuffle: bool,
                 canonical_nodes: int, block_bytes: int,
                 visits: ShardVisits | None = None, overlap: int = 1, pieces: Pieces | None = None) -> np.ndarray:
    """The global order ``G`` of a streamed epoch (see the module docstring).

    Args:
        starts: int64 ``[K + 1]``, shard ``k`` holds sample ids ``starts[k] .. starts[k+1]-1``.
        shard_bytes: bytes of each shard (what the node cache holds for it).
        canonical_nodes: streams the order is cut into; a multiple of the node count.
        block_bytes: the most bytes of shards in one block (a larger shard is a block alone).
        visits: the samples of an epoch drawn with resampling or weights
            (:class:`turbofeed.plan.mixing.EpochDraw`); default every shard once.
        overlap: blocks each stretch of a stream draws from (:mod:`turbofeed.plan.overlap`);
            1 permutes samples inside each block (step 4 above).
        pieces: the shards cut into pieces (:mod:`turbofeed.plan.pieces`): steps 1-4 order
            pieces (each a unit of its own, permuted and grouped into blocks) instead of
            whole shards; None: whole shards.

    Returns:
        int64 sample ids, one per position of the epoch.
    """
    return stream_blocks(starts, shard_bytes, seed=seed, epoch=epoch, shuffle=shuffle,
                         canonical_nodes=canonical_nodes, block_bytes=block_bytes, visits=visits,
                         overlap=overlap, pieces=pieces)[0]


def stream_blocks(starts: np.ndarray, shard_bytes: np.ndarray, *, seed: int, epoch: int, shuffle: bool,
                  canonical_nodes: int, block_bytes: int, visits: ShardVisits | None = None,
                  key: int | None = None, overlap: int = 1,
                  pieces: Pieces | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`stream_order` and the block of every position.

    Args:
        key: one more number the generator is keyed by (a resampled epoch's round,
            :mod:`turbofeed.plan.stream_rounds`); None for a whole epoch.
        overlap, pieces: as for :func:`stream_order`.

    Returns:
        ``(order, block)``: int64 sample ids, and int64 block numbers (stream 0's blocks
        ``0, 1, ..``, then stream 1's, ...) of the same length.
    """
    if canonical_nodes < 1 or block_bytes < 1 or overlap < 1:
        raise ValueError(f"canonical_nodes, block_bytes and overlap must be >= 1, got {canonical_nodes}, "
                         f"{block_bytes}, {overlap}")
    starts = np.asarray(starts, dtype=np.int64)
    if visits is None:
        visits = draw_epoch(np.diff(starts), seed=seed, epoch=epoch)  # every shard once
    if pieces is not None:  # the same samples, visited piece by piece: pieces are the units
        visits = split_visits(visits, pieces)
        starts, shard_bytes = np.asarray(pieces.starts, dtype=np.int64), pieces.nbytes
    shard, bounds, ids = visits.shard, visits.start, visits.ids
    rng = np.random.default_rng([seed, epoch, _TAG] + ([] if key is None else [int(key)]))
    lengths = np.diff(bounds)
    order = rng.permutation(len(shard)) if shuffle else np.arange(len(shard))
    seq_lengths = lengths[order]
    # the ids of the visits in ``order``, one after the other, without a loop per visit
    before = np.cumsum(seq_lengths) - seq_lengths
    total = int(seq_lengths.sum())
    seq = ids[np.arange(total, dtype=np.int64) + np.repeat(bounds[order] - before, seq_lengths)]
    seq_shard = np.repeat(shard[order], seq_lengths)
    per_sample = np.asarray(shard_bytes, dtype=np.float64) / np.maximum(np.diff(starts), 1)
    out = np.empty(total, dtype=np.int64)
    block = np.empty(total, dtype=np.int64)
    edges = stream_edges(total, canonical_nodes)
    numbered = 0
    for c in range(canonical_nodes):
        lo, hi = int(edges[c]), int(edges[c + 1])
        stream, tags = seq[lo:hi], np.empty(hi - lo, dtype=np.int64)
        for b0, b1 in _blocks(seq_shard[lo:hi], per_sample, block_bytes):
            if shuffle and overlap == 1:  # the plain block shuffle, draws as before overlap existed
                stream[b0:b1] = rng.permutation(stream[b0:b1])
            tags[b0:b1] = numbered
            numbered += 1
        if shuffle and overlap > 1:
            perm = overlap_order(tags, overlap, rng, last=key is None)  # a round is followed by the next
            stream, tags = stream[perm], tags[perm]
        out[c::canonical_nodes] = stream
        block[c::canonical_nodes] = tags
    return out, block


def stream_edges(total: int, canonical_nodes: int) -> np.ndarray:
    """Where each canonical stream starts in the shard-ordered sequence: contiguous
    ranges, the first ``total % canonical_nodes`` one sample longer (so that position
    ``p`` of the interleaved order is from stream ``p % canonical_nodes``)."""
    base, extra = divmod(total, canonical_nodes)
    lengths = np.full(canonical_nodes, base, dtype=np.int64)
    lengths[:extra] += 1
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _blocks(seq_shard: np.ndarray, per_sample: np.ndarray, block_bytes: int) -> list[tuple[int, int]]:
    """Cut one stream into blocks of whole shard visits (a visit cut by the stream's edge
    counts the bytes of its samples here) of at most ``block_bytes``, greedily."""
    if not len(seq_shard):
        return []
    change = np.flatnonzero(np.diff(seq_shard)) + 1
    run_start = np.concatenate([[0], change]).astype(np.int64)
    run_end = np.concatenate([change, [len(seq_shard)]]).astype(np.int64)
    run_bytes = (run_end - run_start) * per_sample[seq_shard[run_start]]
    blocks, first, filled = [], 0, 0.0
    for r in range(len(run_start)):
        if r > first and filled + run_bytes[r] > block_bytes:
            blocks.append((int(run_start[first]), int(run_start[r])))
            first, filled = r, 0.0
        filled += float(run_bytes[r])
    blocks.append((int(run_start[first]), len(seq_shard)))
    return blocks


def node_residue(rank: int, world_size: int, ranks_per_node: int) -> tuple[int, int]:
    """``(residue, nodes)``: the positions ``p ≡ residue (mod world_size)`` are this
    rank's, for ranks numbered node by node (torchrun, SLURM: rank = node * R + local)."""
    if ranks_per_node < 1 or world_size % ranks_per_node:
        raise ValueError(f"world size {world_size} is not a multiple of {ranks_per_node} ranks per node")
    nodes = world_size // ranks_per_node
    node, local = divmod(rank, ranks_per_node)
    return local * nodes + node, nodes


def stream_rank_order(order: np.ndarray, *, rank: int, world_size: int, ranks_per_node: int,
                      canonical_nodes: int, drop_last: bool = False, start: int = 0) -> np.ndarray:
    """The sample ids ``rank`` reads from the global order ``order`` after its first
    ``start`` positions: the positions ``p >= start`` with ``p ≡ residue``
    (:func:`node_residue`), ``ceil`` or (``drop_last``) ``floor`` of ``(len - start) / W``
    of them on every rank. Padding positions past the end repeat this rank's own last
    samples (they are in its node's cache), never another node's.

    Raises:
        ValueError: the node count does not divide ``canonical_nodes`` (the streams
            could not be shared out between the nodes).
    """
    residue, nodes = node_residue(rank, world_size, ranks_per_node)
    if canonical_nodes % nodes:
        raise ValueError(f"{nodes} nodes cannot share {canonical_nodes} canonical streams: streaming "
                         f"needs a node count that divides canonical_nodes={canonical_nodes} (the node "
                         f"count of the run that started the epoch); resume on 1, or a divisor, of them")
    total = len(order)
    start = min(max(start, 0), total)
    rest = total - start
    count = rest // world_size if drop_last else -(-rest // world_size)
    first = start + (residue - start) % world_size
    positions = first + world_size * np.arange(count, dtype=np.int64)
    late = positions >= total
    if late.any():
        # pad with this rank's last real positions (same residue), nearest first
        real = positions[~late][::-1]
        if len(real):
            positions[late] = real[np.arange(int(late.sum())) % len(real)]
        else:  # nothing of its own left: wrap to the start of the order, as rank_order does
            positions[late] = np.arange(int(late.sum()), dtype=np.int64) % max(total, 1)
    return order[positions] if total else order[:0]
