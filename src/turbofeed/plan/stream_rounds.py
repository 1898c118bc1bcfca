"""A streamed resampled epoch, generated lazily in rounds: an epoch of any size
(``epoch_size=2_000_000_000``) starts at once, in memory that does not grow with it.

The epoch's global order ``G`` is a concatenation of rounds of :func:`round_length`
``L`` positions (the last one shorter). Round ``r`` is an ordinary streamed order
(:func:`turbofeed.plan.streaming.stream_blocks`: canonical streams cut into blocks of
whole shards that fit ``block_bytes``, samples permuted inside a block) of its own
resampled draw of shards (:func:`turbofeed.plan.mixing.draw_round`), both keyed by
``(seed, epoch, r)``: a round is computed when a position in it is read, from nothing
but the plan's inputs, and forgotten after (a few are cached). ``L`` is a multiple of
``canonical_nodes``, so position ``p`` is from stream ``p % canonical_nodes`` in every
round, as in a whole streamed epoch, and the nodes keep reading disjoint streams::

    round     positions of G   drawn from (seed, epoch, round)       blocks per stream
    0         0 .. L-1          shards s7 s2 s7 s4 ... (resampled)    [s7 s2] [s7 s4] ...
    1         L .. 2L-1         shards s1 s1 s5 ...                   [s1 s1 s5] ...
    ...
    R-1       (R-1)L .. size-1  the rest (size - (R-1)L samples)

``L = canonical_nodes * m``, ``m`` the samples of about ``ROUND_BLOCKS * q (q + 1) / 2``
blocks (:data:`ROUND_BLOCKS` with ``q = overlap`` 1; more with overlapping blocks, whose
last ``q - 1`` stretches per round mix fewer blocks) over the dataset's mean bytes per
sample, at most :data:`MAX_ROUND`
samples in all: a round holds several blocks per stream, so only one visit per group
and round is cut short, and takes at most a few MB. A block's samples come from the
shards of that block (the fetch stage holds the shards of the ``overlap`` blocks being
read and the next one, :class:`turbofeed.io.stores.stream.ShardStream`); a shard drawn in two
blocks is fetched for each (from the node cache while it is still there).

Ranks split ``G`` as :func:`turbofeed.plan.streaming.stream_rank_order` does (residue
``l * nodes + n``, padding with the rank's own last samples), lazily:
:class:`RoundsRankOrder` maps a rank's element ``j`` to its position in ``G``, so a
resume at any ``start`` computes only the rounds it reads; the rounds do not depend
on the world size, so resume is exact and elastic as for a whole streamed epoch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .lazy_chunks import LazyChunks
from .mixing import EpochDraw, draw_round
from .resampled import ResampledRankOrder
from .streaming import StreamLayout, node_residue, stream_blocks

ROUND_BLOCKS = 4  # blocks per stream in a round (about)
MAX_ROUND = 1 << 20  # samples in a round at most: 8 MiB of ids
_CACHED = 3  # rounds kept (the one read, the next one prefetched, one more)


def round_length(layout: StreamLayout) -> int:
    """``L``: positions per round, a multiple of ``canonical_nodes`` (module docstring)."""
    sizes = np.diff(np.asarray(layout.starts, dtype=np.int64))
    mean = float(np.sum(layout.shard_bytes)) / max(int(sizes.sum()), 1)  # bytes per sample
    # overlap q: the q - 1 stretches at a round's end mix fewer blocks (plan/overlap.py), so a
    # round holds q (q + 1) / 2 times more blocks (the same ROUND_BLOCKS with q = 1)
    q = layout.overlap
    per_stream = int(ROUND_BLOCKS * q * (q + 1) // 2 * layout.block_bytes / max(mean, 1.0))
    per_stream = min(per_stream, MAX_ROUND // layout.canonical_nodes)
    return layout.canonical_nodes * max(1, per_stream)


class StreamRounds(LazyChunks[tuple[np.ndarray, np.ndarray]]):
    """The global order ``G`` of one streamed resampled epoch, round by round.

    Args:
        draw: the epoch's draw (``resample``, ``epoch_size``, weights).
        layout: the stream layout (shard sizes and bytes, canonical nodes, block bytes).
        seed, epoch, shuffle: as for a whole streamed epoch.

    Thread-safe: rounds are cached under a lock; a round computed twice is the same.
    """

    def __init__(self, draw: EpochDraw, layout: StreamLayout, *, seed: int, epoch: int, shuffle: bool) -> None:
        draw_round(draw.shard_sizes, seed=seed, epoch=epoch, round=0, size=0, groups=draw.groups,
                   weights=draw.weights)  # checks sizes, groups and weights now; nothing drawn
        if draw.size and not np.sum(draw.shard_sizes):
            raise ValueError(f"epoch_size {draw.size} needs samples, but all shards are empty")
        self.draw, self.layout = draw, layout
        self.seed, self.epoch, self.shuffle = int(seed), int(epoch), bool(shuffle)
        super().__init__(draw.size, round_length(layout), _CACHED, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        self.round_len = self.chunk_len

    @property
    def rounds(self) -> int:
        """Rounds in the epoch."""
        return -(-self.size // self.round_len)

    def round(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Round ``r``'s ``(ids, block)``: int64 sample ids of positions ``r * L ..``, and
        the block of each (numbered within the round, see ``stream_blocks``)."""
        return self.chunk(r)

    def _compute(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Round ``r``: its own draw of shards, streamed (module docstring)."""
        size = min(self.round_len, self.size - r * self.round_len)
        d, lay = self.draw, self.layout
        visits = draw_round(d.shard_sizes, seed=self.seed, epoch=self.epoch, round=r, size=size, groups=d.groups,
                            weights=d.weights)
        return stream_blocks(lay.starts, lay.shard_bytes, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle,
                             canonical_nodes=lay.canonical_nodes, block_bytes=lay.block_bytes, visits=visits, key=r,
                             overlap=lay.overlap, pieces=lay.pieces)

    def _ids(self, chunk: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return chunk[0]

    def __getitem__(self, position: int) -> int:
        r, q = divmod(position, self.round_len)
        return int(self.chunk(r)[0][q])


class RoundsRankOrder(ResampledRankOrder):
    """One rank's lazy order over :class:`StreamRounds`: what
    :func:`turbofeed.plan.streaming.stream_rank_order` returns for the whole global
    order, without holding it. Element ``j`` is position ``first + j * world_size``
    (``first``: the rank's first position ``>= start`` with its residue); past the end,
    the padding repeats the rank's own last positions, nearest first::

        size 10, start 0, world_size 4, residue 3 -> positions 3 7 7   (7: padding)

    Same interface as :class:`~turbofeed.plan.resampled.ResampledRankOrder`, plus
    :meth:`chunks` (the order round by round, with blocks, for the fetch stage).

    Raises:
        ValueError: the node count does not divide ``canonical_nodes``.
    """

    def __init__(self, rounds: StreamRounds, *, rank: int, world_size: int, drop_last: bool, start: int) -> None:
        layout = rounds.layout
        residue, nodes = node_residue(rank, world_size, layout.ranks_per_node)
        if layout.canonical_nodes % nodes:
            raise ValueError(f"{nodes} nodes cannot share {layout.canonical_nodes} canonical streams: streaming "
                             f"needs a node count that divides canonical_nodes={layout.canonical_nodes} (the "
                             "node count of the run that started the epoch); resume on 1, or a divisor, of them")
        super().__init__(rounds, rank=rank, world_size=world_size, drop_last=drop_last, start=max(start, 0))
        self._rounds = rounds  # self.epoch, typed as what it is
        self._real_from(self.start + (residue - self.start) % world_size)  # the rank's first position

    def positions(self, j: np.ndarray) -> np.ndarray:
        """The global positions of elements ``j`` (int64 array)."""
        j = np.asarray(j, dtype=np.int64)
        w, real = self.world_size, self._real
        if real:
            late = np.maximum(j - real, 0) % real  # padding: the real ones from the last back
            return np.where(j < real, self._first + w * j, self._first + w * (real - 1 - late))
        return j % max(len(self.epoch), 1)  # nothing of its own: wrap to the start (stream_rank_order)

    def chunks(self, j0: int = 0) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(j, ids, block)`` from element ``j0`` on, one round at a time (the padding
        last): elements ``j .. j + len(ids) - 1`` are ``ids``, and ``block`` tells which
        block each is from (with ``j``, it tells apart two blocks holding one shard)."""
        rounds = self._rounds
        w, length, j = self.world_size, rounds.round_len, max(0, j0)
        while j < self._n:
            if j < self._real:
                p = self._first + w * j
                r = p // length
                end = min(self._real, j + -(-(min((r + 1) * length, len(rounds)) - p) // w))
                where = self._first + w * np.arange(j, end, dtype=np.int64) - r * length
                ids, block = rounds.round(r)
                yield j, ids[where], block[where]
            else:
                end = self._n
                pos = self.positions(np.arange(j, end, dtype=np.int64))
                yield j, rounds.at(pos), np.full(end - j, -1, dtype=np.int64)  # padding: one chunk apart
            j = end


def rounds_rank_order(draw: EpochDraw, layout: StreamLayout, *, seed: int, epoch: int, shuffle: bool, rank: int,
                      world_size: int, drop_last: bool, start: int) -> RoundsRankOrder:
    """The lazy order of ``rank`` in a streamed resampled ``epoch`` (module docstring)."""
    return RoundsRankOrder(StreamRounds(draw, layout, seed=seed, epoch=epoch, shuffle=shuffle), rank=rank,
                           world_size=world_size, drop_last=drop_last, start=start)
