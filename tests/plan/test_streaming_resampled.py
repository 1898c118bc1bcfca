"""plan.stream_rounds: a streamed resampled epoch generated lazily, round by round. An epoch
of 2e9 samples plans at once in little memory; the order is a function of the plan's inputs
alone; ranks see what stream_rank_order gives over the whole global order (so resume is
exact and elastic); blocks hold whole shards that fit the block size; weights hold in
expectation and every sample of a dataset is equally likely."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest
from resume_check import PLAN, PlanRun, check_resume

from turbofeed.plan import EpochDraw, StreamLayout, make_epoch_plan
from turbofeed.plan.stream_rounds import RoundsRankOrder, StreamRounds, round_length
from turbofeed.plan.streaming import stream_rank_order

SIZES = np.array([10, 0, 14, 10, 6, 10, 10, 12])
STARTS = np.concatenate([[0], np.cumsum(SIZES)]).astype(np.int64)
BYTES = SIZES * 100  # 100 bytes per sample


def layout(c: int = 2, block: int = 2000, ranks_per_node: int = 1) -> StreamLayout:
    return StreamLayout(starts=STARTS, shard_bytes=BYTES, canonical_nodes=c, block_bytes=block,
                        ranks_per_node=ranks_per_node)


def draw(size: int, **kw) -> EpochDraw:
    return EpochDraw(shard_sizes=SIZES, epoch_size=size, resample=True, **kw)


def whole(rounds: StreamRounds) -> np.ndarray:
    return np.concatenate([rounds.round(r)[0] for r in range(rounds.rounds)])


def shard_of(ids: np.ndarray) -> np.ndarray:
    return np.searchsorted(STARTS, ids, side="right") - 1


def test_a_two_billion_sample_streamed_epoch_plans_at_once_in_little_memory():
    # a child process, so that the RSS it reports is this plan's alone (the old code built
    # the whole order: 16 GB of ids, minutes)
    code = textwrap.dedent("""
        import resource, sys, time
        import numpy as np
        from turbofeed.plan import EpochDraw, StreamLayout, make_epoch_plan
        sizes = np.full(1000, 1000)
        lay = StreamLayout(starts=np.concatenate([[0], np.cumsum(sizes)]), shard_bytes=sizes * 1000,
                           canonical_nodes=2, block_bytes=50_000_000, ranks_per_node=2)
        draw = EpochDraw(shard_sizes=sizes, epoch_size=2_000_000_000, resample=True)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        plan = make_epoch_plan(0, batch_size=256, seed=1, epoch=3, shuffle=True, rank=3, world_size=4,
                               stream=lay, draw=draw, start=1_234_567_890)
        first = plan.order[0:256]
        took = time.perf_counter() - t
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(len(plan.order), took, grown, len(set(first.tolist())))
    """)
    import os
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)))
    assert out.returncode == 0, out.stderr[-2000:]
    n, took, grown_kib, distinct = out.stdout.split()
    print("took", took, "s, grew", grown_kib, "KiB")
    assert int(n) == -(-(2_000_000_000 - 1_234_567_890) // 4)  # ceil: padded
    assert float(took) < 1.0  # loose: well under a second, not minutes
    assert int(grown_kib) < 200 * 1024  # loose: tens of MB at most, not GB
    assert int(distinct) > 200  # real samples, drawn


@pytest.mark.parametrize("c, world, per_node, start, drop_last", [
    (1, 1, 1, 0, False), (2, 2, 1, 0, False), (2, 4, 2, 37, False), (4, 2, 1, 5, True), (2, 6, 3, 991, False),
    (2, 3, 3, 0, True)])
def test_a_rank_reads_what_stream_rank_order_gives_over_the_whole_order(c, world, per_node, start, drop_last):
    size = 1003
    rounds = StreamRounds(draw(size), layout(c, ranks_per_node=per_node), seed=5, epoch=2, shuffle=True)
    assert rounds.round_len % c == 0 and rounds.rounds > 3  # several rounds, the last one shorter
    everything = whole(rounds)
    assert len(everything) == size
    for rank in range(world):
        lazy = RoundsRankOrder(rounds, rank=rank, world_size=world, drop_last=drop_last, start=start)
        expected = stream_rank_order(everything, rank=rank, world_size=world, ranks_per_node=per_node,
                                     canonical_nodes=c, drop_last=drop_last, start=start)
        assert len(lazy) == len(expected)
        assert lazy.tolist() == expected.tolist()
        assert [lazy[j] for j in range(len(lazy))] == expected.tolist()
        assert np.array_equal(lazy[3:40], expected[3:40])
        chunks = list(lazy.chunks())
        assert np.array_equal(np.concatenate([ids for _, ids, _ in chunks]), expected)
        assert [j for j, _, _ in chunks] == np.cumsum([0] + [len(ids) for _, ids, _ in chunks])[:-1].tolist()


def test_the_order_is_a_function_of_the_plan_inputs_alone():
    def plan(**kw):
        args = dict(batch_size=8, seed=3, epoch=1, shuffle=True, rank=1, world_size=2, stream=layout(), draw=draw(600))
        args.update(kw)
        return make_epoch_plan(0, **args).order.tolist()

    first = plan()
    assert plan() == first
    assert plan(epoch=2) != first and plan(seed=4) != first
    assert plan(stream=layout(block=1000)) != first  # the blocks (and rounds) follow the block size
    # resume: a later start continues the same global order, on any world size
    assert plan(rank=0, world_size=1, start=160) == plan(world_size=1, rank=0)[160:]


def test_exact_and_elastic_resume_mid_epoch():
    rounds = StreamRounds(draw(900), layout(2, ranks_per_node=2), seed=0, epoch=4, shuffle=True)  # 2 canonical nodes

    def ranks(world: int, drop_last: bool) -> PlanRun:  # 8 samples a rank a step
        return PlanRun(lambda rank, world_size, epoch, start: RoundsRankOrder(
            rounds, rank=rank, world_size=world_size, drop_last=drop_last, start=start), world_size=world, batch_size=8)

    everything = whole(rounds)
    # 2 nodes of 2 ranks: 225 samples a rank, 29 steps
    check_resume(lambda: ranks(4, False), stops=[0, 5, 28, 29], kind=PLAN)
    # they read 5 steps (160 positions), then 1 node of 2 ranks resumes
    result = check_resume(lambda: ranks(4, False), stops=[5], kind=PLAN, then=lambda: ranks(2, True), elastic=True)
    assert Counter(i for step in result.runs[0].head for i in step) == Counter(everything[:160].tolist())  # G's prefix
    assert Counter(i for step in result.steps for i in step) == Counter(everything.tolist())
    # the rest, exactly (900 - 160 is even): elastic=True allowed nothing lost or repeated


def test_blocks_hold_whole_shards_that_fit_and_streams_are_node_disjoint():
    rounds = StreamRounds(draw(4000), layout(c=2, block=2000), seed=9, epoch=0, shuffle=True)
    for r in range(rounds.rounds):
        ids, block = rounds.round(r)
        for b in np.unique(block).tolist():
            in_block = ids[block == b]
            assert len(in_block) <= 20 or len(set(shard_of(in_block).tolist())) == 1  # <= 2000 bytes or one shard
            where = np.flatnonzero(block == b)
            assert len(set((where % 2).tolist())) == 1  # a block belongs to one stream
        assert block[0::2].max() < block[1::2].min()  # stream 0's blocks, then stream 1's


def test_weights_hold_in_expectation_and_samples_of_a_dataset_are_equally_likely():
    groups = np.array([0, 0, 0, 1, 1, 1, 1, 1])
    d = EpochDraw(shard_sizes=SIZES, groups=groups, weights=(0.8, 0.2), epoch_size=50_000, resample=True)
    rounds = StreamRounds(d, layout(c=2, block=600), seed=2, epoch=0, shuffle=True)
    assert rounds.round_len < 100  # many small rounds: the shares must hold anyway
    ids = whole(rounds)
    group = groups[shard_of(ids)]
    assert abs((group == 0).mean() - 0.8) < 0.01
    counts = np.bincount(ids[group == 0], minlength=24)[:24]
    assert counts.min() > 0.85 * counts.mean() and counts.max() < 1.15 * counts.mean()
    assert not np.isin(ids, np.arange(10, 10)).any() and shard_of(ids).min() >= 0


def test_the_round_length_follows_the_block_size_and_stays_bounded():
    assert round_length(layout(c=2, block=2000)) == 2 * 4 * 20  # 4 blocks of 20 samples per stream
    assert round_length(layout(c=4, block=10)) == 4  # at least one sample per stream
    assert round_length(layout(c=2, block=1 << 50)) <= 1 << 20


def test_a_streamed_plan_held_whole_tells_the_block_of_each_position():
    # weighted, 3 passes, no resampling: every shard is in 3 blocks, which the fetch stage
    # must tell apart (it holds a shard per block, not from its first pass to its last)
    d = EpochDraw(shard_sizes=SIZES, groups=np.zeros(8, np.int64), weights=(1.0,), epoch_size=3 * int(SIZES.sum()))
    plan = make_epoch_plan(0, batch_size=8, seed=1, epoch=0, shuffle=True, rank=0, world_size=1,
                           stream=layout(c=1, block=2000), draw=d)
    assert plan.blocks is not None and len(plan.blocks) == len(plan.order)
    blocks_of = {}
    for b in np.unique(plan.blocks).tolist():
        ids = plan.order[plan.blocks == b]
        where = np.flatnonzero(plan.blocks == b)
        assert where.max() - where.min() + 1 == len(where)  # one stream: a block is contiguous
        assert len(ids) <= 20 or len(set(shard_of(ids).tolist())) == 1  # fits 2000 bytes, or one shard
        for k in set(shard_of(ids).tolist()):
            blocks_of.setdefault(k, set()).add(b)
    assert all(len(blocks) >= 2 for blocks in blocks_of.values()) and len(blocks_of) == 7  # shard 1 is empty


@pytest.mark.parametrize("size, start", [(3, 0), (5, 2), (1, 0)])
def test_a_rank_with_no_position_of_its_own_pads_as_stream_rank_order_does(size, start):
    # fewer positions than ranks: some rank's residue is past the end, so all it reads is padding
    rounds = StreamRounds(draw(size), layout(4), seed=1, epoch=0, shuffle=True)
    everything = whole(rounds)
    for rank in range(4):
        lazy = RoundsRankOrder(rounds, rank=rank, world_size=4, drop_last=False, start=start)
        expected = stream_rank_order(everything, rank=rank, world_size=4, ranks_per_node=1, canonical_nodes=4,
                                     drop_last=False, start=start)
        assert len(expected) == 1
        assert lazy.tolist() == expected.tolist() and lazy[0] == expected[0]
        assert np.concatenate([ids for _, ids, _ in lazy.chunks()]).tolist() == expected.tolist()
