"""plan.mixing: resampled epochs and weighted mixing of datasets are pure, deterministic arithmetic.

Checks the identity default, resampling with replacement (P(shard) ∝ size, exact epoch
size), weighted quotas with largest-remainder rounding, whole passes before any repeat,
balanced repeats, the errors for bad weights, and that the default stays cheap at 10M
samples / 100k shards.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from turbofeed.plan.mixing import ShardVisits, draw_epoch, draw_round, quotas


def shard_of(sizes, ids: np.ndarray) -> np.ndarray:
    """The shard that holds each global id."""
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return np.searchsorted(starts, ids, side="right") - 1


def check_structure(v: ShardVisits, sizes, max_partial: int = 1) -> None:
    """Invariants of any draw: int64 arrays, consistent offsets, every visit non-empty,
    its ids inside its shard and distinct, and at most ``max_partial`` visits (the last of
    each group) holding less than their whole shard."""
    sizes = np.asarray(sizes)
    assert v.shard.dtype == v.start.dtype == v.ids.dtype == np.int64
    assert v.start.shape == (len(v.shard) + 1,) and v.start[0] == 0 and v.start[-1] == len(v) == len(v.ids)
    lens = np.diff(v.start)
    assert (lens > 0).all()
    visit = np.repeat(np.arange(len(v.shard)), lens)
    assert np.array_equal(shard_of(sizes, v.ids), v.shard[visit])
    pairs = np.unique(np.stack([visit, v.ids]), axis=1)
    assert pairs.shape[1] == len(v.ids), "an id repeats within one visit"
    assert (lens <= sizes[v.shard]).all()
    assert int((lens < sizes[v.shard]).sum()) <= max_partial


# --- default: the identity, cheap -------------------------------------------------------

def test_default_is_every_shard_once_in_order():
    sizes = np.array([3, 0, 2, 5, 0])
    v = draw_epoch(sizes, seed=4, epoch=9)
    assert v.ids.tolist() == list(range(10))
    assert v.shard.tolist() == [0, 2, 3]  # empty shards: no visit
    assert v.start.tolist() == [0, 3, 5, 10]
    check_structure(v, sizes, max_partial=0)
    # groups alone (no weights) do not change the default
    assert np.array_equal(draw_epoch(sizes, seed=1, epoch=0, groups=np.array([1, 0, 1, 0, 0])).ids, v.ids)


@pytest.mark.parametrize("sizes", [[], [0, 0]])
def test_default_without_samples_is_empty(sizes):
    v = draw_epoch(np.array(sizes, dtype=np.int64), seed=0, epoch=0)
    assert len(v) == 0 and len(v.shard) == 0 and v.start.tolist() == [0]


def test_default_is_cheap_at_10m_samples_100k_shards():
    """Not a benchmark: well under 1 s normally, 5 s keeps it robust on a loaded machine."""
    sizes = np.random.default_rng(0).integers(50, 151, 100_000)  # ~10M samples
    began = time.perf_counter()
    v = draw_epoch(sizes, seed=0, epoch=3)
    elapsed = time.perf_counter() - began
    assert elapsed < 5.0, f"default draw took {elapsed:.2f} s"
    assert len(v) == sizes.sum() > 9_000_000 and len(v.shard) == 100_000
    assert v.ids[0] == 0 and v.ids[-1] == len(v) - 1 and (np.diff(v.ids[::9973]) == 9973).all()


# --- resample ----------------------------------------------------------------------------

SIZES = np.array([5, 0, 12, 1, 30, 7])


@pytest.mark.parametrize("epoch_size", [None, 1, 37, 55, 1000])
def test_resample_gives_exactly_epoch_size_valid_ids(epoch_size):
    v = draw_epoch(SIZES, seed=2, epoch=1, resample=True, epoch_size=epoch_size)
    assert len(v) == (SIZES.sum() if epoch_size is None else epoch_size)
    assert ((v.ids >= 0) & (v.ids < SIZES.sum())).all()
    assert 1 not in v.shard.tolist()  # empty shard never drawn
    check_structure(v, SIZES)
    full = np.diff(v.start)[:-1] == SIZES[v.shard[:-1]]
    assert full.all(), "every visit but the last brings its whole shard"


def test_resample_is_a_function_of_seed_and_epoch():
    a = draw_epoch(SIZES, seed=7, epoch=2, resample=True, epoch_size=500)
    b = draw_epoch(SIZES, seed=7, epoch=2, resample=True, epoch_size=500)
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.shard, b.shard) and np.array_equal(a.start, b.start)
    by_epoch = {draw_epoch(SIZES, seed=7, epoch=e, resample=True, epoch_size=500).shard.tobytes() for e in range(10)}
    assert len(by_epoch) == 10
    other_seed = draw_epoch(SIZES, seed=8, epoch=2, resample=True, epoch_size=500)
    assert not np.array_equal(a.shard, other_seed.shard)


def test_resample_gives_every_sample_the_same_expected_count():
    """Over 60 epochs (~7200 draws), shards are drawn uniformly, so each shard's share of
    the samples is its share of the data (∝ size) and every id appears about equally
    often. Drawing shards ∝ size would give visit shares 0.1 0.2 0.3 0.4, sample shares
    ∝ size², and ids of the small shard 4x rarer than those of the big one."""
    sizes = np.array([10, 20, 0, 30, 40])
    visits = np.zeros(len(sizes))
    per_id = np.zeros(sizes.sum())
    for epoch in range(60):
        v = draw_epoch(sizes, seed=11, epoch=epoch, resample=True, epoch_size=3000)
        visits += np.bincount(v.shard, minlength=len(sizes))
        per_id += np.bincount(v.ids, minlength=sizes.sum())
    assert visits[2] == 0
    np.testing.assert_allclose(visits[sizes > 0] / visits.sum(), 0.25, atol=0.03)
    sample_share = np.bincount(shard_of(sizes, np.arange(100)), weights=per_id, minlength=5) / per_id.sum()
    np.testing.assert_allclose(sample_share, sizes / sizes.sum(), atol=0.03)
    assert np.abs(per_id / 1800 - 1).max() < 0.2  # 60 * 3000 / 100 = 1800 each


def test_resample_without_samples():
    with pytest.raises(ValueError, match="all shards are empty"):
        draw_epoch(np.array([0, 0]), seed=0, epoch=0, resample=True, epoch_size=4)
    assert len(draw_epoch(np.array([0, 0]), seed=0, epoch=0, resample=True)) == 0


# --- epoch_size without weights: whole passes, then part of one ---------------------------

def test_epoch_size_takes_whole_passes_then_a_part():
    sizes = np.random.default_rng(5).integers(0, 9, 40)
    shards = np.flatnonzero(sizes)
    n = int(sizes.sum())
    v = draw_epoch(sizes, seed=3, epoch=0, epoch_size=2 * n + n // 2)
    check_structure(v, sizes)
    k = len(shards)
    for p in range(2):  # each whole pass: every non-empty shard once, its own order
        assert sorted(v.shard[p * k:(p + 1) * k].tolist()) == shards.tolist()
    assert not np.array_equal(v.shard[:k], v.shard[k:2 * k])
    assert not np.array_equal(v.shard[:k], shards)
    counts = np.bincount(v.ids, minlength=n)
    assert len(v) == 2 * n + n // 2 and set(counts.tolist()) == {2, 3}
    assert (counts == 3).sum() == n // 2


@pytest.mark.parametrize("resample", [False, True])
def test_last_visit_is_a_seeded_random_subset(resample):
    """One shard of 50: an epoch of 20 is one cut visit holding 20 distinct ids, a
    different subset each epoch, not the shard's first 20."""
    subsets = set()
    for epoch in range(6):
        v = draw_epoch(np.array([50]), seed=0, epoch=epoch, epoch_size=20, resample=resample)
        assert v.shard.tolist() == [0] and len(np.unique(v.ids)) == 20
        subsets.add(v.ids.tobytes())
    assert len(subsets) == 6 and np.arange(20).tobytes() not in subsets


@pytest.mark.parametrize("epoch_size", [0, 1, 6, 17])
def test_epoch_size_below_total_repeats_nothing(epoch_size):
    sizes = np.array([4, 0, 6, 7])
    v = draw_epoch(sizes, seed=1, epoch=5, epoch_size=epoch_size)
    check_structure(v, sizes)
    assert len(v) == epoch_size and len(np.unique(v.ids)) == epoch_size


def test_epoch_size_equal_to_total_is_a_shard_permutation_per_epoch():
    sizes = np.arange(1, 30)
    orders = set()
    for epoch in range(5):
        v = draw_epoch(sizes, seed=0, epoch=epoch, epoch_size=int(sizes.sum()))
        check_structure(v, sizes, max_partial=0)
        assert np.array_equal(np.sort(v.ids), np.arange(sizes.sum()))
        orders.add(v.shard.tobytes())
    assert len(orders) == 5


# --- weights ------------------------------------------------------------------------------

def test_quotas_largest_remainder():
    assert quotas([0.5, 0.3, 0.2], 7) == [4, 2, 1]  # 3.5 2.1 1.4
    assert quotas([1, 1, 1], 10) == [4, 3, 3]  # ties go to the lower group
    assert quotas([2, 6], 10) == quotas([0.25, 0.75], 10) == [3, 7]  # 2.5 7.5: tie -> group 0
    assert quotas([1, 0, 1], 5) == [3, 0, 2]
    assert quotas([3], 0) == [0]
    rng = np.random.default_rng(0)
    for _ in range(200):
        w = rng.random(rng.integers(1, 8)) * (rng.random(1) < 0.9)
        w[0] += 1e-3
        size = int(rng.integers(0, 10_000))
        q = quotas(list(w), size)
        exact = size * w / w.sum()
        assert sum(q) == size and all(abs(a - b) < 1 for a, b in zip(q, exact))


MIX_SIZES = np.array([4, 6, 0, 3, 10, 2, 5, 8])  # group 0: 10 | group 1: 3 | group 2: 17 | group 3: 8
MIX_GROUPS = np.array([0, 0, 0, 1, 2, 2, 2, 3])


def group_counts(v: ShardVisits, sizes=MIX_SIZES, groups=MIX_GROUPS, n_groups: int = 4) -> list[int]:
    return np.bincount(groups[shard_of(sizes, v.ids)], minlength=n_groups).tolist()


@pytest.mark.parametrize("resample", [False, True])
@pytest.mark.parametrize("weights, epoch_size, expected", [
    ([1, 1, 1, 1], None, [10, 10, 9, 9]),  # 38 / 4 = 9.5: ties to the lower groups
    ([0.5, 0.3, 0.2, 0.0], 7, [4, 2, 1, 0]),
    ([1, 2, 3, 4], 100, [10, 20, 30, 40]),
    ([1, 1, 1, 0], 10, [4, 3, 3, 0]),
])
def test_weights_give_each_group_its_exact_quota(resample, weights, epoch_size, expected):
    v = draw_epoch(MIX_SIZES, seed=3, epoch=2, groups=MIX_GROUPS, weights=weights, epoch_size=epoch_size,
                   resample=resample)
    assert group_counts(v) == expected
    check_structure(v, MIX_SIZES, max_partial=4)
    a = draw_epoch(MIX_SIZES, seed=3, epoch=2, groups=MIX_GROUPS, weights=weights, epoch_size=epoch_size,
                   resample=resample)
    assert np.array_equal(a.ids, v.ids) and np.array_equal(a.shard, v.shard)


def test_weights_no_repeat_within_a_group_up_to_its_size():
    v = draw_epoch(MIX_SIZES, seed=0, epoch=0, groups=MIX_GROUPS, weights=[10, 3, 17, 8], epoch_size=38)
    assert group_counts(v) == [10, 3, 17, 8]
    assert np.array_equal(np.sort(v.ids), np.arange(38))  # quota == size: each sample exactly once
    for epoch in range(20):
        v = draw_epoch(MIX_SIZES, seed=0, epoch=epoch, groups=MIX_GROUPS, weights=[9, 2, 13, 7], epoch_size=31)
        assert group_counts(v) == [9, 2, 13, 7] and len(np.unique(v.ids)) == 31


def test_weights_repeat_a_small_group_evenly():
    """Group 1 (3 samples) gets a quota of 3 * 50 + 2 = 152: every sample 50 or 51 times."""
    v = draw_epoch(MIX_SIZES, seed=9, epoch=4, groups=MIX_GROUPS, weights=[0, 152, 0, 0], epoch_size=152)
    assert group_counts(v) == [0, 152, 0, 0]
    counts = np.bincount(v.ids, minlength=38)
    assert sorted(counts[10:13].tolist()) == [50, 51, 51] and counts.sum() == counts[10:13].sum()
    # four equal quotas of 25: groups of 10, 3, 17, 8 samples -> 2-3, 8-9, 1-2, 3-4 times each
    v = draw_epoch(MIX_SIZES, seed=9, epoch=4, groups=MIX_GROUPS, weights=[1, 1, 1, 1], epoch_size=100)
    counts = np.bincount(v.ids, minlength=38)
    group_of_id = MIX_GROUPS[shard_of(MIX_SIZES, np.arange(38))]
    for g, n in enumerate([10, 3, 17, 8]):
        got = counts[group_of_id == g]
        assert len(got) == n and got.sum() == 25 and set(got.tolist()) == {25 // n, 25 // n + 1}


def test_weight_zero_group_is_absent():
    v = draw_epoch(MIX_SIZES, seed=1, epoch=0, groups=MIX_GROUPS, weights=[1, 0, 1, 0], epoch_size=50)
    present = set(MIX_GROUPS[v.shard].tolist())
    assert present == {0, 2}
    # a weight-0 group may even be empty
    v = draw_epoch(MIX_SIZES, seed=1, epoch=0, groups=MIX_GROUPS, weights=[1, 1, 1, 1, 0], epoch_size=20)
    assert len(v) == 20


def test_weighted_draws_are_a_function_of_seed_and_epoch():
    sizes, groups = np.arange(1, 41), np.arange(40) % 3
    def draw(seed, epoch):
        return draw_epoch(sizes, seed=seed, epoch=epoch, groups=groups, weights=[1, 2, 1], epoch_size=1500)
    assert np.array_equal(draw(5, 1).ids, draw(5, 1).ids)
    assert len({draw(5, e).shard.tobytes() for e in range(8)}) == 8
    assert not np.array_equal(draw(5, 1).shard, draw(6, 1).shard)


@pytest.mark.parametrize("weights, groups, match", [
    ([1, -1, 1, 1], MIX_GROUPS, r"weights\[1\] = -1"),
    ([1, float("nan"), 1, 1], MIX_GROUPS, r"weights\[1\] = nan"),
    ([0, 0, 0, 0], MIX_GROUPS, "no positive one"),
    ([], MIX_GROUPS, "no positive one"),
    ([1, 1, 1], MIX_GROUPS, r"groups must be in 0\.\.2 \(len\(weights\) == 3"),
    ([1, 1, 1, 1, 1], MIX_GROUPS, r"group\(s\) \[4\] have weight > 0 but no samples"),
    ([1, 1], np.array([0, 0, 1, 0, 0, 0, 0, 0]), r"group\(s\) \[1\] have weight > 0 but no samples"),
    ([1, 1, 1, 1], MIX_GROUPS[:-1], "groups must be 8 integers"),
    ([1, 1, 1, 1], MIX_GROUPS - 1, r"groups must be in 0\.\.3"),
])
def test_bad_weights_or_groups_raise(weights, groups, match):
    with pytest.raises(ValueError, match=match):
        draw_epoch(MIX_SIZES, seed=0, epoch=0, groups=groups, weights=weights)


@pytest.mark.parametrize("sizes, kwargs, match", [
    ([3, -1], {}, "shard_sizes must be"),
    ([[3, 1]], {}, "shard_sizes must be"),
    ([1.5, 2.0], {}, "shard_sizes must be"),
    ([3, 1], {"epoch_size": -1}, "epoch_size must be >= 0"),
])
def test_bad_sizes_raise(sizes, kwargs, match):
    with pytest.raises(ValueError, match=match):
        draw_epoch(np.array(sizes), seed=0, epoch=0, **kwargs)


def test_large_weighted_mix_is_cheap():
    sizes = np.random.default_rng(1).integers(50, 151, 100_000)
    groups = np.arange(100_000) % 3
    began = time.perf_counter()
    for resample in (False, True):
        v = draw_epoch(sizes, seed=0, epoch=0, groups=groups, weights=[1, 2, 0.5], resample=resample)
        assert len(v) == sizes.sum()
    assert time.perf_counter() - began < 10.0


# --- ShardVisits helpers ------------------------------------------------------------------

def test_visit_of_and_ids_in_order():
    v = draw_epoch(np.array([3, 0, 2, 4]), seed=0, epoch=0)
    assert v.visit_of(0) == 0 and v.visit_of(4) == 1 and v.visit_of(5) == 2
    assert v.visit_of(np.array([2, 3, 8])).tolist() == [0, 1, 2]
    assert v.ids_in_order(np.array([2, 0, 1])).tolist() == [5, 6, 7, 8, 0, 1, 2, 3, 4]
    m = draw_epoch(MIX_SIZES, seed=2, epoch=0, groups=MIX_GROUPS, weights=[1, 1, 1, 1], epoch_size=30)
    assert np.array_equal(m.ids_in_order(np.arange(len(m.shard))), m.ids)  # partial visits kept
    assert len(v.ids_in_order(np.array([], dtype=np.int64))) == 0


def test_a_round_draws_shards_with_replacement_not_in_passes():
    # 8 shards of 10, rounds of 80 samples: passes would visit each shard exactly once; drawn
    # with replacement, all 8 distinct has probability 8!/8**8 (0.24%) per round
    sizes = np.full(8, 10)
    repeats = 0
    for r in range(5):
        visits = draw_round(sizes, seed=0, epoch=0, round=r, size=80)
        assert len(visits) == 80 and np.array_equal(np.diff(visits.start), sizes[visits.shard])  # whole shards
        repeats += len(set(visits.shard.tolist())) < len(visits.shard)
    assert repeats == 5
