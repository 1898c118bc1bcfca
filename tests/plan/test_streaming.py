"""The streamed epoch order: two-level shuffle, node-disjoint streams, exact and elastic resume."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from turbofeed.plan.streaming import node_residue, stream_order, stream_rank_order


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


def test_exact_resume_is_the_rest_of_the_uninterrupted_order():
    g = order(c=2)
    b, world = 4, 4
    for r in range(world):
        full = stream_rank_order(g, rank=r, world_size=world, ranks_per_node=2, canonical_nodes=2)
        k = 3  # batches done
        rest = stream_rank_order(g, rank=r, world_size=world, ranks_per_node=2, canonical_nodes=2,
                                 start=k * b * world)
        assert np.array_equal(rest, full[k * b:])


@pytest.mark.parametrize("new_world,new_per_node", [(2, 1), (2, 2), (1, 1), (8, 4)])
def test_elastic_resume_loses_and_repeats_nothing(new_world, new_per_node):
    g = order(c=2)
    b, world = 3, 4
    k = 2
    done = np.concatenate([stream_rank_order(g, rank=r, world_size=world, ranks_per_node=2,
                                             canonical_nodes=2)[:k * b] for r in range(world)])
    rest = [stream_rank_order(g, rank=r, world_size=new_world, ranks_per_node=new_per_node,
                              canonical_nodes=2, start=k * b * world, drop_last=True) for r in range(new_world)]
    seen = np.concatenate([done, *rest])
    assert len(seen) == len(set(seen.tolist()))  # nothing twice
    assert len(seen) >= 80 - new_world + 1       # only drop_last's tail (< world) is left out
    assert sorted(done.tolist()) == sorted(g[:k * b * world].tolist())  # the prefix is what was done


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
