"""plan.resampled: a resampled epoch drawn lazily. The sample at position p is a pure
function of (seed, epoch, p), whatever else was asked before; ranks see exactly what
rank_order gives for the same global order; weights and per-sample counts hold in
expectation; an epoch of 2e9 positions costs no memory for its size."""

from __future__ import annotations

import numpy as np
import pytest

from turbofeed.plan import EpochDraw, make_epoch_plan, rank_order
from turbofeed.plan.resampled import BLOCK, ResampledEpoch, ResampledRankOrder

SIZES = np.array([30, 0, 50, 20, 7])


def test_each_position_is_a_function_of_seed_epoch_and_position_alone():
    far = [3, BLOCK - 1, BLOCK, 5 * BLOCK + 17, 1_999_999_999]
    fresh = [ResampledEpoch(SIZES, seed=4, epoch=2, size=2_000_000_000)[p] for p in far]
    walked = ResampledEpoch(SIZES, seed=4, epoch=2, size=2_000_000_000)
    walked.at(np.arange(3 * BLOCK))  # other blocks drawn first, in another order
    assert [walked[p] for p in reversed(far)][::-1] == fresh
    assert list(walked.at(np.array(far))) == fresh
    other_epoch = ResampledEpoch(SIZES, seed=4, epoch=3, size=2_000_000_000).at(np.arange(1000))
    other_seed = ResampledEpoch(SIZES, seed=5, epoch=2, size=2_000_000_000).at(np.arange(1000))
    here = walked.at(np.arange(1000))
    assert not np.array_equal(here, other_epoch) and not np.array_equal(here, other_seed)


def test_every_sample_has_the_same_expected_count_and_no_empty_shard_is_drawn():
    ids = ResampledEpoch(SIZES, seed=0, epoch=0, size=1_070_000).at(np.arange(1_070_000))
    counts = np.bincount(ids, minlength=int(SIZES.sum()))
    assert ids.min() >= 0 and ids.max() < SIZES.sum()
    assert counts.min() > 0.9 * 10_000 and counts.max() < 1.1 * 10_000  # 107 samples, 10000 draws each


def test_weights_decide_the_share_of_each_group_in_expectation():
    groups = np.array([0, 0, 1, 1, 2])
    draw = EpochDraw(shard_sizes=SIZES, groups=groups, weights=(0.6, 0.3, 0.1), epoch_size=400_000, resample=True)
    ids = draw.resampled(seed=1, epoch=0).at(np.arange(400_000))
    group_of_id = np.repeat(groups, SIZES)
    share = np.bincount(group_of_id[ids], minlength=3) / len(ids)
    assert np.allclose(share, [0.6, 0.3, 0.1], atol=0.005)
    in_group1 = np.bincount(ids[group_of_id[ids] == 1], minlength=int(SIZES.sum()))[30:100]
    assert in_group1[in_group1 > 0].size == 70 and in_group1.max() < 1.2 * in_group1.mean()  # uniform inside
    zero = EpochDraw(shard_sizes=SIZES, groups=groups, weights=(1, 0, 1), epoch_size=10_000, resample=True)
    assert not np.isin(zero.resampled(seed=0, epoch=0).at(np.arange(10_000)), np.arange(30, 100)).any()
    with pytest.raises(ValueError, match="weight > 0 but no samples"):
        EpochDraw(shard_sizes=np.array([5, 0]), groups=np.array([0, 1]), weights=(1, 1), epoch_size=9,
                  resample=True).resampled(seed=0, epoch=0)


@pytest.mark.parametrize("size, world_size, start, drop_last", [
    (10, 3, 0, False), (10, 3, 4, False), (10, 3, 4, True), (10, 4, 9, False), (10, 4, 10, False),
    (BLOCK + 5, 3, 7, False), (7, 8, 0, False), (7, 8, 0, True), (0, 2, 0, False)])
def test_a_rank_sees_exactly_what_rank_order_gives_for_the_same_global_order(size, world_size, start, drop_last):
    epoch = ResampledEpoch(SIZES, seed=9, epoch=1, size=size)
    everything = epoch.at(np.arange(size))
    for rank in range(world_size):
        lazy = ResampledRankOrder(epoch, rank=rank, world_size=world_size, drop_last=drop_last, start=start)
        expected = rank_order(size, seed=9, epoch=1, shuffle=False, rank=rank, world_size=world_size,
                              drop_last=drop_last, start=start, population=everything)
        assert len(lazy) == len(expected)
        assert lazy.tolist() == expected.tolist() and [lazy[j] for j in range(len(lazy))] == expected.tolist()
        assert np.array_equal(lazy[np.arange(len(lazy))], expected) and np.array_equal(lazy[1:4], expected[1:4])


def test_the_plan_of_a_two_billion_sample_epoch_is_lazy_and_resumes_at_any_position():
    draw = EpochDraw(shard_sizes=SIZES, epoch_size=2_000_000_000, resample=True)
    plan = make_epoch_plan(0, batch_size=256, seed=3, epoch=7, shuffle=True, rank=1, world_size=4, draw=draw)
    assert len(plan.order) == 500_000_000 and len(plan) == 1_953_125
    done = 1_234_567 * 256 * 4  # samples_done after 1234567 steps on 4 ranks
    later = make_epoch_plan(0, batch_size=256, seed=3, epoch=7, shuffle=True, rank=1, world_size=4, draw=draw,
                            start=done)
    assert later.order[0:256].tolist() == plan.order[1_234_567 * 256:1_234_568 * 256].tolist()


def test_groups_without_weights_are_one_dataset():
    # groups only mean something with weights: without them, every sample equally likely
    groups = np.array([0, 0, 1, 1, 2])
    plain = EpochDraw(shard_sizes=SIZES, epoch_size=5000, resample=True).resampled(seed=3, epoch=1)
    grouped = EpochDraw(shard_sizes=SIZES, groups=groups, epoch_size=5000, resample=True).resampled(seed=3, epoch=1)
    assert np.array_equal(grouped.at(np.arange(5000)), plain.at(np.arange(5000)))


@pytest.mark.parametrize("groups, weights", [([0, 0, 1, 1, 1], (0, 0)), ([0, 1, 0, 0, 0], (0, 1))])
def test_an_epoch_whose_weighted_groups_hold_no_sample_is_refused(groups, weights):
    # weight 0 on the groups with samples, weight > 0 only on an empty one (shard 1 holds 0)
    with pytest.raises(ValueError, match="no group with samples"):
        ResampledEpoch(SIZES, seed=0, epoch=0, size=10, groups=np.array(groups), weights=weights)


def test_an_index_past_either_end_is_refused_as_a_list_refuses_it():
    epoch = ResampledEpoch(SIZES, seed=2, epoch=0, size=10)
    lazy = ResampledRankOrder(epoch, rank=1, world_size=3, drop_last=False, start=0)
    assert len(lazy) == 4 and lazy[-1] == lazy[3] and lazy[-4] == lazy[0]
    for j in (4, -5):
        with pytest.raises(IndexError, match="out of range"):
            lazy[j]


def test_an_epoch_of_no_samples_over_empty_shards_is_empty():
    # a dataset whose shards are all empty, resampled, epoch_size 0: an empty order (it raised
    # IndexError: the draw's cumulative shares were empty)
    epoch = EpochDraw(shard_sizes=np.array([0, 0]), resample=True).resampled(seed=0, epoch=0)
    assert len(epoch) == 0 and epoch.at(np.zeros(0, np.int64)).tolist() == []
    assert ResampledRankOrder(epoch, rank=0, world_size=2, drop_last=False, start=0).tolist() == []
