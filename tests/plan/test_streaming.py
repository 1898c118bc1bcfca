"""The streamed epoch order: two-level shuffle, node-disjoint streams, exact and elastic resume."""

from __future__ import annotations

import dataclasses
import warnings
from collections import Counter

import numpy as np
import pytest
from resume_check import PLAN, PlanRun, check_resume

from turbofeed.plan import make_epoch_plan
from turbofeed.plan.streaming import StreamLayout, node_residue, stream_blocks, stream_order, stream_rank_order


def shards(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def shard_of(starts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return np.searchsorted(starts, ids, side="right") - 1


STARTS = shards([10] * 8)            # 8 shards of 10 samples
BYTES = np.full(8, 1000)             # 100 bytes per sample


def order(epoch: int = 0, c: int = 2, block: int = 2000, shuffle: bool = True, starts=STARTS, nbytes=BYTES):
    return stream_order(starts, nbytes, seed=7, epoch=epoch, shuffle=shuffle, canonical_nodes=c, block_bytes=block)


def test_every_sample_once_and_reproducible():
    g = order()
    assert sorted(g.tolist()) == list(range(80))
    assert np.array_equal(g, order())
    assert not np.array_equal(g, order(epoch=1))


def test_streams_are_interleaved_and_blocks_hold_whole_shards():
    starts = STARTS
    g = order(c=2, block=2000)  # 2 shards per block, 4 shards per stream
    for c in range(2):
        stream = shard_of(starts, g[c::2])
        assert len(set(stream.tolist())) == 4
        # block 1 = the first 20 samples: exactly two shards, all of their samples
        first, second = stream[:20], stream[20:]
        assert len(set(first.tolist())) == 2 and Counter(first.tolist()).most_common()[-1][1] == 10
        assert not set(first.tolist()) & set(second.tolist())
        # samples are permuted inside the block, not left in shard order
        assert (np.diff(first) != 0).sum() > 2


def test_a_shard_larger_than_the_block_is_a_block_alone():
    starts, nbytes = shards([10, 10, 10]), np.array([5000, 100, 100])
    g = stream_order(starts, nbytes, seed=0, epoch=0, shuffle=True, canonical_nodes=1, block_bytes=1000)
    runs = shard_of(starts, g)
    big = np.flatnonzero(runs == 0)
    assert big.max() - big.min() == 9  # its 10 samples are one contiguous block


def test_unshuffled_is_shard_order_interleaved():
    g = order(shuffle=False, c=2)
    assert g[0::2].tolist() == list(range(40)) and g[1::2].tolist() == list(range(40, 80))


@pytest.mark.parametrize("world,per_node", [(4, 2), (2, 1), (2, 2), (6, 3)])
def test_ranks_of_a_node_share_its_streams_and_nodes_are_disjoint(world, per_node):
    nodes = world // per_node
    c = nodes
    g = order(c=c)
    taken = {r: stream_rank_order(g, rank=r, world_size=world, ranks_per_node=per_node, canonical_nodes=c)
             for r in range(world)}
    assert len({len(t) for t in taken.values()}) == 1  # equal steps
    flat = np.concatenate(list(taken.values()))
    assert set(flat.tolist()) == set(range(80)) and len(flat) - 80 < world  # padding only
    by_node = [set(shard_of(STARTS, np.concatenate([taken[n * per_node + l] for l in range(per_node)])).tolist())
               for n in range(nodes)]
    for a in range(nodes):
        for b in range(a + 1, nodes):
            assert not by_node[a] & by_node[b], (a, b, by_node)
    if per_node > 1:  # the ranks of one node read the same shards, at the same time
        first = [set(shard_of(STARTS, taken[l][:5]).tolist()) for l in range(per_node)]
        assert all(f <= by_node[0] for f in first)


def test_padding_repeats_the_ranks_own_samples():
    starts = shards([7] * 3)  # 21 samples on 4 ranks: 6 each, 3 padded positions
    g = stream_order(starts, np.full(3, 700), seed=1, epoch=0, shuffle=True, canonical_nodes=2, block_bytes=700)
    taken = [stream_rank_order(g, rank=r, world_size=4, ranks_per_node=2, canonical_nodes=2) for r in range(4)]
    assert {len(t) for t in taken} == {6}
    flat = np.concatenate(taken)
    assert set(flat.tolist()) == set(range(21)) and len(flat) == 24
    for t in taken:
        assert len(set(t.tolist())) >= 5
    dropped = [stream_rank_order(g, rank=r, world_size=4, ranks_per_node=2, canonical_nodes=2, drop_last=True)
               for r in range(4)]
    flat = np.concatenate(dropped)
    assert {len(t) for t in dropped} == {5} and len(set(flat.tolist())) == 20


def ranks_of(g: np.ndarray, *, world: int, per_node: int, batch: int, drop_last: bool = False) -> PlanRun:
    """The ranks' ``stream_rank_order`` of ``g`` stepped as the loader steps them."""
    return PlanRun(lambda rank, world_size, epoch, start: stream_rank_order(
        g, rank=rank, world_size=world_size, ranks_per_node=per_node, canonical_nodes=2, start=start,
        drop_last=drop_last), world_size=world, batch_size=batch)


def test_exact_resume_is_the_rest_of_the_uninterrupted_order():
    g = order(c=2)  # 80 samples on 4 ranks, batches of 4: 5 steps
    check_resume(lambda: ranks_of(g, world=4, per_node=2, batch=4), stops=range(6), kind=PLAN)


@pytest.mark.parametrize("new_world,new_per_node", [(2, 1), (2, 2), (1, 1), (8, 4)])
def test_elastic_resume_loses_and_repeats_nothing(new_world, new_per_node):
    """Nothing twice; only drop_last's tail (< the new world size) is left out."""
    g = order(c=2)
    result = check_resume(lambda: ranks_of(g, world=4, per_node=2, batch=3), stops=[0, 2, 5], kind=PLAN,
                          then=lambda: ranks_of(g, world=new_world, per_node=new_per_node, batch=3, drop_last=True),
                          elastic=True, may_lose=new_world - 1)
    for run in result.runs:  # the prefix is what was done
        assert sorted(i for step in run.head for i in step) == sorted(g[:run.stop * 3 * 4].tolist())


def test_node_count_must_divide_the_canonical_streams():
    g = order(c=2)
    with pytest.raises(ValueError, match="canonical_nodes=2"):
        stream_rank_order(g, rank=0, world_size=3, ranks_per_node=1, canonical_nodes=2)
    with pytest.raises(ValueError, match="ranks per node"):
        node_residue(0, 3, 2)


def test_large_orders_are_fast_enough():
    starts = shards([1000] * 2000)  # 2M samples
    g = stream_order(starts, np.full(2000, 10 << 20), seed=0, epoch=0, shuffle=True, canonical_nodes=4,
                     block_bytes=2 << 30)
    assert len(g) == 2_000_000 and g.min() == 0 and g.max() == 1_999_999


def runs(starts: np.ndarray, ids: np.ndarray) -> list[int]:
    """The shards of ``ids`` in order, one entry per run of samples from the same shard."""
    of = shard_of(starts, ids)
    return [int(of[0])] + [int(s) for a, s in zip(of[:-1], of[1:]) if s != a] if len(of) else []


def test_samples_inside_one_block_are_shuffled_across_its_shards():
    """A stream that is one block (everything fits): its samples are permuted across
    shards, not left in the shard order the first level drew."""
    g = order(c=1, block=10**9)
    assert sorted(g.tolist()) == list(range(80))
    assert len(runs(STARTS, g)) > 40          # shards interleave (8 runs if left in shard order)
    for k in range(8):                        # and each shard's samples are permuted
        mine = g[shard_of(STARTS, g) == k]
        assert not np.array_equal(mine, np.sort(mine))
    assert not np.array_equal(g, order(c=1, block=10**9, epoch=1))


@pytest.mark.parametrize("c", [1, 2, 4])
def test_block_bytes_one_makes_every_shard_a_block_of_its_own(c):
    """``block_bytes=1``: every shard is larger than a block, so each is a block alone:
    its samples stay together (whole shard, contiguous in its stream) but are shuffled."""
    g = order(c=c, block=1)
    assert sorted(g.tolist()) == list(range(80))
    for s in range(c):
        stream = g[s::c]
        of = shard_of(STARTS, stream)
        change = np.flatnonzero(np.diff(of)) + 1
        pieces = np.split(stream, change)
        assert len(pieces) == len(set(of.tolist()))   # each shard one contiguous run
        shuffled = [p for p in pieces if len(p) > 2 and not np.array_equal(p, np.sort(p))]
        assert len(shuffled) >= len(pieces) - 1       # inside each, the samples are permuted


@pytest.mark.parametrize("bad", [{"canonical_nodes": 0}, {"block_bytes": 0}, {"block_bytes": -5}])
def test_canonical_nodes_and_block_bytes_must_be_positive(bad):
    kw = dict(seed=0, epoch=0, shuffle=True, canonical_nodes=1, block_bytes=1)
    with pytest.raises(ValueError, match="must be >= 1"):
        stream_order(STARTS, BYTES, **{**kw, **bad})


def test_shards_of_one_sample_are_blocks_by_their_bytes():
    """Shards of one sample, 100 bytes each: ``block_bytes=250`` makes blocks of 2
    consecutive shards of the drawn shard order, 399 of 3; each block's samples are
    permuted among themselves only. (With blocks of one shard the order is the drawn
    shard order itself: the in-block shuffles come after the shard draw.)"""
    starts, nbytes = shards([1] * 12), np.full(12, 100)

    def draw(block: int) -> np.ndarray:
        return stream_order(starts, nbytes, seed=3, epoch=0, shuffle=True, canonical_nodes=1, block_bytes=block)

    shard_order = draw(1)
    assert sorted(shard_order.tolist()) == list(range(12))
    assert shard_order.tolist() != list(range(12))
    for block, per in ((250, 2), (399, 3), (1200, 12)):
        g = draw(block)
        cut = [set(g[i:i + per].tolist()) for i in range(0, 12, per)]
        assert cut == [set(shard_order[i:i + per].tolist()) for i in range(0, 12, per)], block
        assert not np.array_equal(g, shard_order), block  # permuted inside some block


def test_an_epoch_with_fewer_samples_than_canonical_nodes():
    """3 samples cut into 4 streams: one stream is empty; every sample is still placed
    once, and every rank of 4 nodes gets one (the one with nothing pads from the start)."""
    starts = shards([1, 2])
    g = stream_order(starts, np.array([100, 200]), seed=0, epoch=0, shuffle=True, canonical_nodes=4,
                     block_bytes=1000)
    assert sorted(g.tolist()) == [0, 1, 2]
    taken = [stream_rank_order(g, rank=r, world_size=4, ranks_per_node=1, canonical_nodes=4) for r in range(4)]
    assert [len(t) for t in taken] == [1, 1, 1, 1]
    assert [t.tolist() for t in taken[:3]] == [[int(x)] for x in g]
    assert taken[3].tolist() == [int(g[0])]  # nothing of its own: wraps to the order's start
    assert [len(stream_rank_order(g, rank=r, world_size=4, ranks_per_node=1, canonical_nodes=4, drop_last=True))
            for r in range(4)] == [0, 0, 0, 0]
    empty = stream_order(shards([0]), np.array([0]), seed=0, epoch=0, shuffle=True, canonical_nodes=2,
                         block_bytes=1)
    assert empty.tolist() == []
    assert stream_rank_order(empty, rank=1, world_size=2, ranks_per_node=1, canonical_nodes=2).tolist() == []


def test_a_layout_is_one_rank_per_node_unless_told_and_keeps_what_resume_needs():
    layout = StreamLayout(starts=STARTS, shard_bytes=BYTES, canonical_nodes=4, block_bytes=2000)
    assert layout.state() == {"canonical_nodes": 4, "block_bytes": 2000, "overlap": 1, "piece_bytes": 0}
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.block_bytes = 1  # type: ignore[misc]
    g = order(c=4)
    for rank in range(4):  # rank 1 is node 1 here; with 2 ranks per node it would be node 0
        plan = make_epoch_plan(80, batch_size=5, seed=7, epoch=0, shuffle=True, rank=rank, world_size=4,
                               stream=layout)
        assert np.array_equal(plan.order, stream_rank_order(g, rank=rank, world_size=4, ranks_per_node=1,
                                                            canonical_nodes=4))


def test_empty_shards_take_no_place_and_raise_no_warning():
    """A shard with no samples (all left out at indexing) is a zero-length visit: it is in
    no block and its bytes per sample are never divided by zero (``-W error`` runs too)."""
    starts = shards([10, 0, 10, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = stream_order(starts, np.array([1000, 0, 1000, 500]), seed=0, epoch=0, shuffle=True,
                         canonical_nodes=2, block_bytes=1000)
    assert sorted(g.tolist()) == list(range(20))


def test_start_outside_the_order_is_clamped_and_bad_ranks_per_node_are_named():
    g = order(c=2)
    kw = dict(world_size=4, ranks_per_node=2, canonical_nodes=2)
    for rank in range(4):
        assert np.array_equal(stream_rank_order(g, rank=rank, start=-7, **kw), stream_rank_order(g, rank=rank, **kw))
        assert stream_rank_order(g, rank=rank, start=len(g) + 3, **kw).tolist() == []
    for per_node in (0, -2):
        with pytest.raises(ValueError, match="ranks per node"):
            node_residue(0, 4, per_node)


@pytest.mark.parametrize("start", [5, 6, 7, 13])
def test_a_start_that_is_not_a_multiple_of_the_world_size_still_splits_the_rest(start):
    """An elastic resume can start at any prefix (done on 3 ranks, resumed on 4): the
    ranks then take every later position once, each its own residue."""
    g = order(c=2)
    world = 4
    taken = {}
    for rank in range(world):
        residue, _ = node_residue(rank, world, 2)
        mine = stream_rank_order(g, rank=rank, world_size=world, ranks_per_node=2, canonical_nodes=2,
                                 start=start, drop_last=True)
        positions = [p for p in range(start, len(g)) if p % world == residue][:len(mine)]
        assert mine.tolist() == g[positions].tolist(), rank
        taken[rank] = mine
    flat = np.concatenate(list(taken.values()))
    assert len(set(flat.tolist())) == len(flat) >= len(g) - start - world + 1


@pytest.mark.parametrize("overlap", [0, -1])
def test_an_overlap_below_one_is_refused(overlap):
    """overlap=0 would be neither the block shuffle (overlap 1) nor the window shuffle
    (overlap > 1): the samples inside each block would silently stay in shard order."""
    kw = dict(seed=0, epoch=0, shuffle=True, canonical_nodes=1, block_bytes=2000)
    with pytest.raises(ValueError, match="must be >= 1"):
        stream_order(STARTS, BYTES, overlap=overlap, **kw)
    assert sorted(stream_order(STARTS, BYTES, overlap=1, **kw).tolist()) == list(range(80))


def test_a_whole_epoch_ends_mixing_overlap_blocks_and_a_round_ends_in_its_last_block():
    """stream_blocks asks overlap_order for the pass's end (``last``) for a whole epoch
    (key None): its last positions mix the last ``overlap`` blocks, as the rest does; a
    resampled round (a key) thins out to its last block, the next round mixing from there."""
    starts, nbytes = shards([60] * 8), np.full(8, 6000)  # one shard per block of 6000 bytes
    kw = dict(seed=3, epoch=0, shuffle=True, canonical_nodes=1, block_bytes=6000, overlap=3)
    _, whole = stream_blocks(starts, nbytes, **kw)
    assert len(set(whole[-10:].tolist())) > 1 and set(whole[-10:].tolist()) <= {5, 6, 7}
    _, round_ = stream_blocks(starts, nbytes, key=0, **kw)
    assert set(round_[-10:].tolist()) == {7}
