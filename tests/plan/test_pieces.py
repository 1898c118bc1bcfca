"""Pieces of shards as the streamed order's units (issue 29, item 3): a node cache of 6
shards out of 12 gives batches of 64 from >= 6 shards, every sample once, a pure function
of the plan (exact and elastic resume), and the pieces held at once fit the cache."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from resume_check import PLAN, PlanRun, check_resume

from turbofeed.engine.layout import MAX_PIECE_OVERLAP, PIECE_MIN_BYTES, PIECE_MIN_SAMPLES, window_blocks
from turbofeed.plan import StreamLayout
from turbofeed.plan.mixing import EpochDraw
from turbofeed.plan import make_epoch_plan
from turbofeed.plan.pieces import Pieces, cut_pieces, cut_shard, split_visits
from turbofeed.plan.stream_rounds import StreamRounds
from turbofeed.plan.streaming import stream_blocks

PER_SHARD, SAMPLE_BYTES, BATCH = 250, 94_000, 64  # the bench's shards: 250 JPEGs, 23.5 MB


def spans_of(sizes: np.ndarray, rng: np.random.Generator | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each shard's samples' ``(lo, hi)``: members laid one after the other, a 512-byte
    tar header before each sample, sample sizes about ``SAMPLE_BYTES``."""
    out = []
    for n in sizes:
        each = np.full(n, SAMPLE_BYTES) if rng is None else rng.integers(SAMPLE_BYTES // 2, 2 * SAMPLE_BYTES, n)
        end = np.cumsum(each + 512)
        out.append(((end - each).astype(np.int64), end.astype(np.int64)))
    return out


def layout(shards: int, cache_shards: float, *, pieces: bool = True, nodes: int = 1, ranks_per_node: int = 1,
           sizes: np.ndarray | None = None, ahead: int = 0, rng: np.random.Generator | None = None) -> StreamLayout:
    """Shards of ``PER_SHARD`` samples (or ``sizes``), laid out as the loader lays out a node
    cache of ``cache_shards`` mean shards (one canonical stream per node), cut into pieces
    of ``PIECE_MIN_BYTES`` (or whole)."""
    sizes = np.full(shards, PER_SHARD) if sizes is None else sizes
    spans = spans_of(sizes, rng)
    nbytes = np.asarray([int(hi[-1]) for _, hi in spans], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    cut = cut_pieces(starts, nbytes, spans, PIECE_MIN_BYTES, PIECE_MIN_SAMPLES) if pieces else None
    units = nbytes if cut is None else cut.nbytes
    per_sample = float(nbytes.sum()) / starts[-1]
    overlap, block = window_blocks(int(cache_shards * nbytes.mean()), units, MAX_PIECE_OVERLAP if pieces else None,
                                   ahead_bytes=int(ahead * per_sample))  # as engine.layout.stream_layout
    return StreamLayout(starts=starts, shard_bytes=nbytes, canonical_nodes=nodes, block_bytes=block,
                        ranks_per_node=ranks_per_node, overlap=overlap,
                        piece_bytes=PIECE_MIN_BYTES if pieces else 0, pieces=cut)


def plan(lay: StreamLayout, *, epoch: int = 0, seed: int = 0, rank: int = 0, world: int = 1, start: int = 0):
    return make_epoch_plan(int(lay.starts[-1]), batch_size=BATCH, seed=seed, epoch=epoch, shuffle=True, rank=rank,
                           world_size=world, start=start, stream=lay)


def stepped(lay: StreamLayout, *, world: int = 1, batch: int = 1) -> PlanRun:
    """``plan(lay)`` stepped as the loader steps it, for check_resume."""
    return PlanRun(lambda rank, world_size, epoch, start: plan(lay, epoch=epoch, rank=rank, world=world_size,
                                                               start=start), world_size=world, batch_size=batch)


def shards_per_batch(lay: StreamLayout, order: np.ndarray) -> float:
    shard = np.searchsorted(lay.starts, order, side="right") - 1
    n = len(shard) // BATCH
    return float(np.mean([len(np.unique(shard[i * BATCH:(i + 1) * BATCH])) for i in range(n)]))


def mean_mixed(lay: StreamLayout, epochs: int = 10) -> float:
    return float(np.mean([shards_per_batch(lay, plan(lay, epoch=e).order) for e in range(epochs)]))


@pytest.mark.parametrize("ahead", [0, 256])
def test_a_cache_of_6_shards_out_of_12_mixes_at_least_6_per_batch(ahead):
    """The issue's goal: 12 shards of 250 samples, batches of 64, a node cache of 6 shards,
    mean over 10 epochs (the method of docs/streaming.md's table). Whole shards give about
    5 (4 with reads 256 positions ahead); pieces of 8 MiB (2 per shard) give more than 6."""
    whole, cut = layout(12, 6, pieces=False, ahead=ahead), layout(12, 6, ahead=ahead)
    assert len(cut.pieces) == 24
    old, new = mean_mixed(whole), mean_mixed(cut)
    assert old < 5.5 and new >= 6.0, (old, new)


def test_pieces_cut_at_the_floors_and_cover_their_samples():
    rng = np.random.default_rng(1)
    sizes = np.array([250, 40, 500, 100, 63])
    spans = spans_of(sizes, rng)
    nbytes = np.asarray([int(hi[-1]) for _, hi in spans], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    p = cut_pieces(starts, nbytes, spans[:4] + [None], 8 << 20, 64)
    assert set(starts.tolist()) <= set(p.starts.tolist())  # every shard edge is a piece edge
    counts = np.diff(p.starts)
    assert (counts[~p.whole] >= 64).all()
    assert (p.nbytes[~p.whole] >= (8 << 20) * 0.9).all()  # about the floor: cut at sample edges
    assert p.whole[p.shard == 1].all() and p.whole[p.shard == 4].all()  # too small; no spans
    assert p.whole[p.shard == 3].all()  # 100 samples: too few for two pieces of 64
    assert (p.shard == 2).sum() >= 4
    for piece in np.flatnonzero(~p.whole):
        k = int(p.shard[piece])
        lo, hi = spans[k]
        a, b = p.starts[piece] - starts[k], p.starts[piece + 1] - starts[k]
        assert p.lo[piece] == lo[a] and p.hi[piece] == hi[b - 1]
        assert p.holding(k, int(lo[a]), int(hi[a] - lo[a])) == piece
        assert p.holding(k, int(lo[b - 1]), int(hi[b - 1] - lo[b - 1])) == piece
    assert p.holding(4, 123, 5) == int(np.flatnonzero(p.shard == 4)[0])  # a whole shard holds all of it
    assert cut_shard(spans[0][0], spans[0][1], int(nbytes[0]), 0, 64).tolist() == [0, 250]  # 0: whole


@pytest.mark.parametrize("nodes, world", [(1, 1), (1, 4), (2, 2), (2, 6)])
def test_every_sample_once_per_epoch(nodes, world):
    sizes = np.random.default_rng(5).integers(40, 600, size=17)  # uneven shards, some whole
    lay = layout(17, 5 * nodes, nodes=nodes, ranks_per_node=world // nodes, sizes=sizes)
    assert lay.pieces is not None and not lay.pieces.whole.all() and lay.pieces.whole.any()
    got = np.concatenate([plan(lay, rank=r, world=world, epoch=3).order for r in range(world)])
    total = int(lay.starts[-1])
    counts = Counter(got.tolist())
    assert set(counts) == set(range(total))
    assert len(got) - total < world and max(counts.values()) <= 2  # only the end's padding repeats


def test_the_order_is_a_pure_function_of_the_plan_and_resumes_exactly():
    lay = layout(12, 6)
    a, b = plan(lay, seed=3, epoch=2), plan(lay, seed=3, epoch=2)
    assert np.array_equal(a.order, b.order) and np.array_equal(a.blocks, b.blocks)
    assert not np.array_equal(a.order, plan(lay, seed=3, epoch=1).order)
    check_resume(lambda: stepped(lay), stops=[1, 700, 1501, 2999], kind=PLAN)  # a step: a sample


def test_an_elastic_resume_on_fewer_nodes_reads_each_remaining_sample_once():
    """Started on 2 nodes of 2 ranks, resumed after 1000, 2000 or 3000 of its 3500 samples
    on 1 node of 3 ranks: no sample lost, none repeated but the last positions' padding."""
    lay = layout(14, 6, nodes=2, ranks_per_node=2)
    resumed = StreamLayout(starts=lay.starts, shard_bytes=lay.shard_bytes, canonical_nodes=2,
                           block_bytes=lay.block_bytes, ranks_per_node=3, overlap=lay.overlap,
                           piece_bytes=lay.piece_bytes, pieces=lay.pieces)
    result = check_resume(lambda: stepped(lay, world=4, batch=250), stops=[1, 2, 3], kind=PLAN,
                          then=lambda: stepped(resumed, world=3, batch=250), elastic=True, may_repeat=2)
    assert sorted(i for step in result.steps for i in step) == list(range(int(lay.starts[-1])))


def test_whole_pieces_give_the_order_of_whole_shards():
    """A state saved before pieces existed resumes with whole shards: pieces that are the
    shards themselves change nothing (the same draws, blocks and order)."""
    lay = layout(12, 6, pieces=False)
    whole = Pieces.whole_shards(lay.starts, lay.shard_bytes)
    a = stream_blocks(lay.starts, lay.shard_bytes, seed=1, epoch=2, shuffle=True, canonical_nodes=1,
                      block_bytes=lay.block_bytes, overlap=lay.overlap)
    b = stream_blocks(lay.starts, lay.shard_bytes, seed=1, epoch=2, shuffle=True, canonical_nodes=1,
                      block_bytes=lay.block_bytes, overlap=lay.overlap, pieces=whole)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def held_bytes(lay: StreamLayout, order: np.ndarray, blocks: np.ndarray, ahead: int) -> int:
    """The most bytes the fetch stage holds at once: a piece per block that reads it, from
    when a read ``ahead`` of the batches done can reach it to its last read (as
    ``ShardStream`` holds it)."""
    unit = np.searchsorted(lay.pieces.starts, order, side="right") - 1
    key = blocks * len(lay.pieces.starts) + unit
    uniq, first = np.unique(key, return_index=True)
    _, last_rev = np.unique(key[::-1], return_index=True)
    last = len(key) - 1 - last_rev
    size = lay.pieces.nbytes[uniq % len(lay.pieces.starts)]
    counter = np.zeros(len(order) + 1, dtype=np.int64)
    np.add.at(counter, np.maximum(first - ahead, 0), size)
    np.add.at(counter, last + 1, -size)
    return int(np.cumsum(counter).max())


@pytest.mark.parametrize("shards, cache_shards, nodes", [(12, 6, 1), (20, 6, 1), (24, 8, 2)])
@pytest.mark.parametrize("ahead", [0, 100, 256])
def test_the_pieces_held_fit_the_cache_with_the_reads_ahead(shards, cache_shards, nodes, ahead):
    rng = np.random.default_rng(shards)
    sizes = rng.integers(150, 400, size=shards)
    lay = layout(shards, cache_shards, nodes=nodes, sizes=sizes, ahead=ahead, rng=rng)
    cache = int(cache_shards * lay.shard_bytes.mean())
    assert (lay.overlap + 1) * lay.block_bytes <= cache
    for epoch in range(3):
        for rank in range(nodes):
            p = plan(lay, epoch=epoch, rank=rank, world=nodes)
            assert held_bytes(lay, p.order, p.blocks, ahead) <= cache


def test_weighted_and_resampled_epochs_read_pieces_too():
    """A weighted epoch (a shard's visit cut to a random subset) holds the same samples cut
    into pieces; a resampled epoch's rounds mix more shards per batch with pieces."""
    lay = layout(12, 6)
    draw = EpochDraw(shard_sizes=np.diff(lay.starts), epoch_size=4000)
    visits = draw.visits(seed=0, epoch=1)
    split = split_visits(visits, lay.pieces)
    assert np.array_equal(split.ids, visits.ids) and len(split.shard) > len(visits.shard)
    weighted = make_epoch_plan(int(lay.starts[-1]), batch_size=BATCH, seed=0, epoch=1, shuffle=True, stream=lay,
                               draw=draw)
    assert Counter(weighted.order.tolist()) == Counter(visits.ids.tolist())

    def mixed(lay: StreamLayout) -> float:
        rounds = StreamRounds(EpochDraw(shard_sizes=np.diff(lay.starts), resample=True, epoch_size=30_000), lay,
                              seed=0, epoch=0, shuffle=True)
        return shards_per_batch(lay, np.concatenate([rounds.round(r)[0] for r in range(rounds.rounds)]))
    assert mixed(lay) > 1.2 * mixed(layout(12, 6, pieces=False))


def test_the_start_warning_counts_the_shards_that_pieces_mix(caplog):
    """The loader warns at construction when batches would draw from fewer than 8 shards:
    whole shards in a cache of 6 (about 5) warn; their pieces (about 8.5) do not."""
    import logging

    from turbofeed.engine.layout import warn_low_diversity

    cut = layout(12, 6)
    cache = int(6 * cut.shard_bytes.mean())
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        warn_low_diversity(cut.shard_bytes, cache, nodes=1, canonical=1)
    [record] = caplog.records
    assert "about 5.0 shards" in record.message and "each shard is held whole" in record.message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        warn_low_diversity(cut.shard_bytes, cache, nodes=1, canonical=1, units=cut.pieces.nbytes)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="turbofeed"):  # a cache of 3 shards: pieces warn too
        warn_low_diversity(cut.shard_bytes, cache // 2, nodes=1, canonical=1, units=cut.pieces.nbytes)
    [record] = caplog.records
    assert "each piece of a shard is held" in record.message


def test_holding_answers_none_for_a_shard_past_the_last_and_bytes_across_pieces():
    """``holding`` is asked by the fetch stage for every member read: a shard number the
    pieces do not know (one past the last) and a read that crosses a cut are None."""
    sizes = np.array([250, 250])
    spans = spans_of(sizes)
    nbytes = np.asarray([int(hi[-1]) for _, hi in spans], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    p = cut_pieces(starts, nbytes, spans, 8 << 20, 64)
    assert len(p) == 4 and not p.whole.any()
    assert p.holding(2, 0, 1) is None and p.holding(5, 0, 1) is None
    cut = int(p.lo[1])  # the first byte of shard 0's second piece
    assert p.holding(0, cut - 10, 20) is None  # straddles the cut
    assert p.holding(0, cut, 20) == 1 and p.holding(1, 0, 1) is None  # before shard 1's first sample


def test_pieces_are_frozen():
    """``holding`` reads lists copied from the arrays once: the object must not change after."""
    import dataclasses

    p = Pieces.whole_shards(np.array([0, 3, 5]), [100, 200])
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.lo = np.array([1, 1])  # type: ignore[misc]


def test_cut_shard_of_a_shard_too_small_for_two_pieces_is_the_whole_shard():
    lo = np.arange(0, 100 * 1024, 1024, dtype=np.int64)
    hi = lo + 1000
    assert cut_shard(lo, hi, 100 * 1024, 8 << 20, 64).tolist() == [0, 100]  # fewer bytes than two pieces
    assert cut_shard(lo, hi, 100 * 1024, 16 << 10, 64).tolist() == [0, 100]  # fewer samples than two pieces
    # 6 pieces: a cut at the first sample starting at or past j/6 of the 102,376 bytes
    # (17,062 34,125 51,188 68,250 85,313): samples start every 1,024 bytes
    assert cut_shard(lo, hi, 100 * 1024, 16 << 10, 16).tolist() == [0, 17, 34, 50, 67, 84, 100]


def test_split_visits_keeps_the_visits_of_whole_pieces():
    """Whole pieces (one per shard) give the visits back as they were, the same object, and an
    empty shard's visit with them: the draws made from the visits stay those of whole shards."""
    sizes = np.array([5, 0, 7, 3])
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    visits = EpochDraw(shard_sizes=sizes).visits(seed=0, epoch=0)
    whole = Pieces.whole_shards(starts, sizes * 1000)
    assert split_visits(visits, whole) is visits
    cut = Pieces(starts=np.array([0, 2, 5, 5, 12, 15]), shard=np.array([0, 0, 1, 2, 3]),
                 lo=np.array([0, 2000, 0, 0, 0]), hi=np.array([2000, 5000, 0, 7000, 3000]),
                 whole=np.array([False, False, True, True, True]))
    split = split_visits(visits, cut)
    assert np.array_equal(split.ids, visits.ids)
    for v in range(len(split.shard)):  # each visit's ids lie in its piece
        ids = split.ids[split.start[v]:split.start[v + 1]]
        assert ((ids >= cut.starts[split.shard[v]]) & (ids < cut.starts[split.shard[v] + 1])).all()
