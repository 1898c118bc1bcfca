"""The overlapping-window streamed shuffle (issue 29, item 3): batches mix the shards of
several blocks, every sample once, a pure function of the plan (exact and elastic resume),
and the shards the fetch stage must hold at once stay within the node cache."""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np
import pytest
from resume_check import PLAN, PlanRun, check_resume

from turbofeed.engine.layout import warn_low_diversity, window_blocks
from turbofeed.plan import StreamLayout
from turbofeed.plan import make_epoch_plan
from turbofeed.plan.overlap import overlap_order
from turbofeed.plan.stream_rounds import StreamRounds
from turbofeed.plan.mixing import EpochDraw
from turbofeed.plan.streaming import stream_blocks

PER_SHARD, SHARD_BYTES, BATCH = 250, 1000, 64


def layout(shards: int, cache_shards: float, *, nodes: int = 1, ranks_per_node: int = 1,
           max_overlap: int | None = None, sizes: np.ndarray | None = None) -> StreamLayout:
    """``shards`` shards of ``PER_SHARD`` samples (or ``sizes``), sized as the loader sizes a
    node cache of ``cache_shards`` shards (one canonical stream per node)."""
    sizes = np.full(shards, PER_SHARD) if sizes is None else sizes
    nbytes = sizes * (SHARD_BYTES // PER_SHARD)
    window = int(cache_shards * SHARD_BYTES)
    overlap, block = window_blocks(window, nbytes, max_overlap)
    return StreamLayout(starts=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), shard_bytes=nbytes,
                        canonical_nodes=nodes, block_bytes=block, ranks_per_node=ranks_per_node, overlap=overlap)


def plan(lay: StreamLayout, *, epoch: int = 0, seed: int = 0, rank: int = 0, world: int = 1, start: int = 0):
    return make_epoch_plan(int(lay.starts[-1]), batch_size=BATCH, seed=seed, epoch=epoch, shuffle=True, rank=rank,
                           world_size=world, start=start, stream=lay)


def stepped(lay: StreamLayout, *, world: int = 1, batch: int = 1) -> PlanRun:
    """``plan(lay)`` stepped as the loader steps it, for check_resume."""
    return PlanRun(lambda rank, world_size, epoch, start: plan(lay, epoch=epoch, rank=rank, world=world_size,
                                                               start=start), world_size=world, batch_size=batch)


def shard_of(lay: StreamLayout, ids: np.ndarray) -> np.ndarray:
    return np.searchsorted(lay.starts, ids, side="right") - 1


def shards_per_batch(lay: StreamLayout, order: np.ndarray) -> float:
    shard = shard_of(lay, order)
    n = len(shard) // BATCH
    return float(np.mean([len(np.unique(shard[i * BATCH:(i + 1) * BATCH])) for i in range(n)]))


def test_a_cache_of_6_shards_out_of_12_mixes_about_5_per_batch_against_3_for_blocks():
    """The issue's case: node cache of 6 shards, 12 shards, batches of 64. The blocks of
    half the cache gave 3.2 shards per batch; mixing 5 blocks of one shard (the sixth
    downloading) gives about 5, the most a cache of 6 whole shards can hold in use."""
    mixed, plain = layout(12, 6), layout(12, 6, max_overlap=1)
    assert (mixed.overlap, plain.overlap) == (5, 1)
    new = np.mean([shards_per_batch(mixed, plan(mixed, epoch=e).order) for e in range(8)])
    old = np.mean([shards_per_batch(plain, plan(plain, epoch=e).order) for e in range(8)])
    assert old < 3.5 and new >= 4.7, (old, new)


@pytest.mark.parametrize("cache_shards, goal", [(8, 6.0), (10, 7.5)])
def test_a_cache_of_more_shards_mixes_more(cache_shards, goal):
    lay = layout(24, cache_shards)
    got = np.mean([shards_per_batch(lay, plan(lay, epoch=e).order) for e in range(4)])
    assert got >= goal, got


@pytest.mark.parametrize("nodes, world", [(1, 1), (1, 4), (2, 2), (2, 6)])
def test_every_sample_once_per_epoch(nodes, world):
    sizes = np.random.default_rng(5).integers(40, 300, size=17)  # uneven shards
    lay = layout(17, 5 * nodes, nodes=nodes, ranks_per_node=world // nodes, sizes=sizes)
    assert lay.overlap > 1
    got = np.concatenate([plan(lay, rank=r, world=world, epoch=3).order for r in range(world)])
    total = int(lay.starts[-1])
    counts = Counter(got.tolist())
    assert set(counts) == set(range(total))
    assert len(got) - total < world and max(counts.values()) <= 2  # only the end's padding repeats


def test_the_order_is_a_pure_function_of_the_plan():
    lay = layout(12, 6)
    a, b = plan(lay, seed=3, epoch=2), plan(lay, seed=3, epoch=2)
    assert np.array_equal(a.order, b.order) and np.array_equal(a.blocks, b.blocks)
    assert not np.array_equal(a.order, plan(lay, seed=3, epoch=1).order)
    assert not np.array_equal(a.order, plan(lay, seed=4, epoch=2).order)


@pytest.mark.parametrize("stop", [0, 1, 700, 1501, 2999, 3000, 4700])
def test_resume_mid_epoch_gives_exactly_the_rest(stop):
    """A step is one sample here: the plan started at ``stop`` (the next epoch's, past 3000)."""
    check_resume(lambda: stepped(layout(12, 6)), stops=[stop], epochs=2, kind=PLAN)


def test_an_elastic_resume_on_fewer_nodes_reads_each_remaining_sample_once():
    """Started on 2 nodes of 2 ranks (canonical 2), resumed after 1000, 2000 or 3000 of
    its 3500 samples on 1 node of 3 ranks: the rest of the epoch, no sample lost, none
    repeated but the padding of the last positions (2 at most)."""
    lay = layout(14, 6, nodes=2, ranks_per_node=2)
    resumed = StreamLayout(starts=lay.starts, shard_bytes=lay.shard_bytes, canonical_nodes=2,
                           block_bytes=lay.block_bytes, ranks_per_node=3, overlap=lay.overlap)
    check_resume(lambda: stepped(lay, world=4, batch=250), stops=[1, 2, 3], kind=PLAN,
                 then=lambda: stepped(resumed, world=3, batch=250), elastic=True, may_repeat=2)


def held_bytes(lay: StreamLayout, order: np.ndarray, blocks: np.ndarray, ahead: int) -> int:
    """The most bytes the fetch stage holds at once for this rank's order: a shard is held
    per block that reads it, from its first read to its last (as ``ShardStream`` holds it),
    while reads run up to ``ahead`` positions past the batches done."""
    shard = shard_of(lay, order)
    key = blocks * len(lay.starts) + shard
    uniq, first = np.unique(key, return_index=True)
    _, last_rev = np.unique(key[::-1], return_index=True)
    last = len(key) - 1 - last_rev
    size = lay.shard_bytes[uniq % len(lay.starts)]
    counter = np.zeros(len(order) + 1, dtype=np.int64)  # bytes held while ``done`` = t
    np.add.at(counter, np.maximum(first - ahead, 0), size)  # needed from when a read can reach it
    np.add.at(counter, last + 1, -size)  # until its last read is done
    return int(np.cumsum(counter).max())


@pytest.mark.parametrize("shards, cache_shards, nodes", [(12, 6, 1), (20, 6, 1), (30, 9, 1), (24, 8, 2)])
@pytest.mark.parametrize("ahead", [0, 100, 250, 400])
def test_the_holds_fit_the_cache_with_the_reads_ahead(shards, cache_shards, nodes, ahead):
    """A counter of the bytes held (every shard from when a read ``ahead`` of the batches
    done can reach it to its last read) never passes the cache, for the layout the loader
    makes for that lookahead; the same counter catches a layout that mixes twice as many blocks."""
    sizes = np.random.default_rng(shards).integers(150, 251, size=shards)
    nbytes = sizes * (SHARD_BYTES // PER_SHARD)
    cache = cache_shards * SHARD_BYTES
    # one canonical stream per node: each node's cache is the window of its stream
    overlap, block = window_blocks(cache, nbytes, ahead_bytes=ahead * SHARD_BYTES // PER_SHARD)
    assert overlap > 1 and (overlap + 1) * block <= cache, (overlap, block)
    lay = StreamLayout(starts=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), shard_bytes=nbytes,
                       canonical_nodes=nodes, block_bytes=block, overlap=overlap)
    for epoch in range(4):
        for rank in range(nodes):  # one rank per node: a node's holds are its rank's
            p = plan(lay, epoch=epoch, rank=rank, world=nodes)
            assert held_bytes(lay, p.order, p.blocks, ahead) <= cache
    crowded = StreamLayout(starts=lay.starts, shard_bytes=lay.shard_bytes, canonical_nodes=nodes,
                           block_bytes=lay.block_bytes, overlap=2 * lay.overlap + 2)
    worst = max(held_bytes(crowded, p.order, p.blocks, ahead)
                for p in (plan(crowded, epoch=e, world=nodes) for e in range(4)))
    assert worst > cache


def test_overlap_order_draws_each_block_from_overlap_segments_only():
    block = np.repeat(np.arange(10), 50)
    perm = overlap_order(block, 3, np.random.default_rng(0))
    assert sorted(perm.tolist()) == list(range(500))
    seq = block[perm]
    # block b is read after every sample of block b - 3 ... a position reads at most 3 blocks
    first = {b: int(np.flatnonzero(seq == b)[0]) for b in range(10)}
    last = {b: int(np.flatnonzero(seq == b)[-1]) for b in range(10)}
    for b in range(3, 10):
        assert first[b] > last[b - 3]
    assert len(set(seq[:60].tolist())) == 3  # the first stretch already mixes 3 blocks
    with pytest.raises(ValueError, match="overlap"):
        overlap_order(block, 0, np.random.default_rng(0))


def test_overlap_one_is_the_plain_block_shuffle():
    lay = layout(12, 6, max_overlap=1)
    g, blk = stream_blocks(lay.starts, lay.shard_bytes, seed=1, epoch=0, shuffle=True, canonical_nodes=1,
                           block_bytes=lay.block_bytes, overlap=1)
    # each block's samples are contiguous: a batch mixes one block (two at its edges)
    change = np.flatnonzero(np.diff(blk))
    assert len(change) == len(np.unique(blk)) - 1


def test_a_resampled_streamed_epoch_mixes_blocks_too():
    """Rounds of a resampled epoch mix blocks as a whole epoch does (a little less: a shard
    drawn twice in a row, and each round's last stretches, mix fewer)."""
    def mixed(lay: StreamLayout) -> float:
        draw = EpochDraw(shard_sizes=np.diff(lay.starts), resample=True, epoch_size=40_000)
        rounds = StreamRounds(draw, lay, seed=0, epoch=0, shuffle=True)
        ids = np.concatenate([rounds.round(r)[0] for r in range(rounds.rounds)])
        assert len(ids) == 40_000 and rounds.rounds >= 2
        return shards_per_batch(lay, ids)
    new, old = mixed(layout(12, 6)), mixed(layout(12, 6, max_overlap=1))
    assert new >= 4.2 and new > 1.3 * old, (new, old)


def test_a_cache_of_few_shards_is_warned_about_with_the_size_to_ask(caplog):
    nbytes = np.full(40, 1 << 20)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        warn_low_diversity(nbytes, 6 << 20, nodes=1, canonical=1)
    [record] = caplog.records
    assert "about 5.0 shards" in record.message and f"to {9 << 20} bytes (9M)" in record.message  # 8 + 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        warn_low_diversity(nbytes, 9 << 20, nodes=1, canonical=1)  # the size it named is enough
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="turbofeed"):  # reads a shard and a half ahead: 2 more
        warn_low_diversity(nbytes, 9 << 20, nodes=1, canonical=1, ahead_bytes=3 << 19)
    [record] = caplog.records
    assert "about 7.0 shards" in record.message and f"to {10 << 20} bytes" in record.message


def test_overlap_order_edge_cases():
    """One block of overlap permutes within blocks; no elements, no order; the blocks'
    numbering counts only from the first (a stream starting at block 7 orders as one at 0)."""
    block = np.repeat(np.arange(4), 25)
    within = block[overlap_order(block, 1, np.random.default_rng(0))]
    assert within.tolist() == block.tolist()  # blocks stay in turn, shuffled inside
    empty = overlap_order(np.zeros(0, np.int64), 3, np.random.default_rng(0))
    assert empty.dtype == np.int64 and len(empty) == 0
    shifted = overlap_order(block + 7, 3, np.random.default_rng(5))
    assert shifted.tolist() == overlap_order(block, 3, np.random.default_rng(5)).tolist()


def test_the_end_of_a_pass_mixes_overlap_blocks_and_a_round_thins_out():
    """``last`` (the default): the last stretch mixes ``overlap`` blocks like the rest;
    a resampled round's tail (``last=False``) draws from its last block alone."""
    block = np.repeat(np.arange(8), 60)
    tail = 10
    ends = block[overlap_order(block, 3, np.random.default_rng(2))][-tail:]
    assert set(ends.tolist()) == {5, 6, 7}
    round_end = block[overlap_order(block, 3, np.random.default_rng(2), last=False)][-tail:]
    assert set(round_end.tolist()) == {7}
