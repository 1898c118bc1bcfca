"""plan.order: the epoch order and the split across ranks are pure, deterministic arithmetic.

Checks the promises of DESIGN.md "plan": a permutation per (seed, epoch), the strided
rank split of DistributedSampler, equal per-rank counts (wrap-around padding or
truncation), and batch/replacement positions.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np
import pytest
from resume_check import PLAN, PlanRun, check_resume

from turbofeed.plan import (EpochDraw, EpochPlan, StreamLayout, count_batches, epoch_permutation, make_epoch_plan,
                            rank_order)


def _interleave(parts: list[np.ndarray]) -> np.ndarray:
    """Undo the strided split: position r + k*W of the result is parts[r][k]."""
    world = len(parts)
    out = np.empty(sum(len(p) for p in parts), dtype=np.int64)
    for r, part in enumerate(parts):
        out[r::world] = part
    return out


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_epoch_permutation_is_a_permutation(n):
    """Every id appears exactly once, as int64 of shape (n,)."""
    p = epoch_permutation(n, seed=3, epoch=1, shuffle=True)
    assert p.dtype == np.int64 and p.shape == (n,)
    assert np.array_equal(np.sort(p), np.arange(n))


def test_epoch_permutation_is_a_function_of_seed_and_epoch():
    """Same (seed, epoch) gives the same order; another epoch or seed gives another one."""
    a = epoch_permutation(500, seed=7, epoch=2, shuffle=True)
    assert np.array_equal(a, epoch_permutation(500, seed=7, epoch=2, shuffle=True))
    assert not np.array_equal(a, np.arange(500))
    assert not np.array_equal(a, epoch_permutation(500, seed=8, epoch=2, shuffle=True))
    orders = {epoch_permutation(500, seed=7, epoch=e, shuffle=True).tobytes() for e in range(10)}
    assert len(orders) == 10


def test_epoch_permutation_ignores_global_numpy_random_state():
    """The order comes from (seed, epoch) alone, not from np.random's global state."""
    np.random.seed(1)
    a = epoch_permutation(100, seed=0, epoch=0, shuffle=True)
    np.random.seed(2)
    assert np.array_equal(a, epoch_permutation(100, seed=0, epoch=0, shuffle=True))


@pytest.mark.parametrize("seed,epoch", [(0, 0), (5, 3)])
def test_no_shuffle_is_identity(seed, epoch):
    order = epoch_permutation(50, seed=seed, epoch=epoch, shuffle=False)
    assert np.array_equal(order, np.arange(50))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_rank_split_is_strided(world):
    """Rank r gets positions r, r+W, r+2W, ... of the epoch's global order."""
    g = epoch_permutation(24, seed=1, epoch=4, shuffle=True)
    for r in range(world):
        got = rank_order(24, seed=1, epoch=4, shuffle=True, rank=r, world_size=world)
        assert np.array_equal(got, g[r::world])


@pytest.mark.parametrize("world", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_are_disjoint_and_complete_when_divisible(world, drop_last):
    parts = [rank_order(48, seed=2, epoch=0, shuffle=True, rank=r, world_size=world,
                        drop_last=drop_last) for r in range(world)]
    assert {len(p) for p in parts} == {48 // world}
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(48))


def test_uneven_split_matches_the_documented_table():
    """n=10, W=3: padding wraps g0, g1 onto ranks 1 and 2; drop_last cuts g9."""
    g = epoch_permutation(10, seed=9, epoch=1, shuffle=True)
    padded = [rank_order(10, seed=9, epoch=1, shuffle=True, rank=r, world_size=3) for r in range(3)]
    assert [p.tolist() for p in padded] == [
        [g[0], g[3], g[6], g[9]], [g[1], g[4], g[7], g[0]], [g[2], g[5], g[8], g[1]]]
    cut = [rank_order(10, seed=9, epoch=1, shuffle=True, rank=r, world_size=3, drop_last=True)
           for r in range(3)]
    assert [p.tolist() for p in cut] == [[g[0], g[3], g[6]], [g[1], g[4], g[7]], [g[2], g[5], g[8]]]


def _random_cases(count: int = 30) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(12345)
    return [(int(rng.integers(1, 300)), int(rng.integers(1, 10)), int(rng.integers(1, 40)))
            for _ in range(count)] + [(2, 5, 1), (1, 8, 3), (10, 3, 4)]  # n < W included


@pytest.mark.parametrize("n,world,batch", _random_cases())
def test_equal_steps_on_every_rank(n, world, batch):
    """Every rank has the same sample and batch count; padding wraps cyclically from the
    start of the global order, truncation keeps a disjoint prefix."""
    g = epoch_permutation(n, seed=4, epoch=2, shuffle=True)
    for drop_last in (False, True):
        parts = [rank_order(n, seed=4, epoch=2, shuffle=True, rank=r, world_size=world,
                            drop_last=drop_last) for r in range(world)]
        per_rank = n // world if drop_last else -(-n // world)
        assert all(len(p) == per_rank for p in parts)
        total = per_rank * world
        if drop_last:
            assert np.array_equal(_interleave(parts), g[:total])
            assert len(np.unique(np.concatenate(parts))) == total
        else:
            assert np.array_equal(_interleave(parts), g[np.arange(total) % n])
            assert set(np.concatenate(parts).tolist()) == set(range(n))
        plans = [make_epoch_plan(n, batch_size=batch, seed=4, epoch=2, shuffle=True, rank=r,
                                 world_size=world, drop_last=drop_last) for r in range(world)]
        assert len({len(p) for p in plans}) == 1
        assert all(np.array_equal(p.order, parts[r]) for r, p in enumerate(plans))


def _resume_cases() -> list[tuple[int, int, int, int, int]]:
    """(n, W, batch, batches done, new W) with k * batch * W <= n."""
    rng = np.random.default_rng(777)
    cases = []
    while len(cases) < 20:
        n, w, b = int(rng.integers(1, 300)), int(rng.integers(1, 9)), int(rng.integers(1, 20))
        if b * w <= n:
            cases.append((n, w, b, int(rng.integers(0, n // (b * w) + 1)), int(rng.integers(1, 9))))
    return cases


@pytest.mark.parametrize("n,world,batch,done,new_world", _resume_cases())
def test_start_continues_the_epoch(n, world, batch, done, new_world):
    """k batches of b on W ranks consume exactly the global prefix of length k*b*W; starting
    after it continues each rank exactly (same W), and with another W serves every
    remaining sample once, padded by wrap-around from the start of the epoch's order."""
    g = epoch_permutation(n, seed=11, epoch=3, shuffle=True)
    start = done * batch * world
    kw = dict(seed=11, epoch=3, shuffle=True)
    full = [rank_order(n, rank=r, world_size=world, **kw) for r in range(world)]
    assert set(np.concatenate([f[:done * batch] for f in full]).tolist()) == set(g[:start].tolist())
    ranks = partial(PlanRun, lambda rank, world_size, epoch, start: rank_order(
        n, rank=rank, world_size=world_size, start=start, **kw), world_size=world, batch_size=batch)
    check_resume(ranks, stops=[done], kind=PLAN)
    parts = [rank_order(n, rank=r, world_size=new_world, start=start, **kw)
             for r in range(new_world)]
    rest = n - start
    assert {len(p) for p in parts} == {-(-rest // new_world)}
    pad = -rest % new_world
    assert np.array_equal(_interleave(parts), np.concatenate([g[start:], g[np.arange(pad) % n]]))
    cut = [rank_order(n, rank=r, world_size=new_world, start=start, drop_last=True, **kw)
           for r in range(new_world)]
    assert np.array_equal(_interleave(cut), g[start:start + rest // new_world * new_world])


def test_start_at_or_past_the_end_and_negative():
    for start in (10, 25):
        assert rank_order(10, seed=0, epoch=0, shuffle=True, world_size=3, start=start).size == 0
    with pytest.raises(ValueError, match="start"):
        rank_order(10, seed=0, epoch=0, shuffle=True, start=-1)


def test_zero_samples_gives_empty_orders():
    for drop_last in (False, True):
        assert rank_order(0, seed=0, epoch=0, shuffle=True, rank=1, world_size=2,
                          drop_last=drop_last).size == 0


@pytest.mark.parametrize("per_rank,batch,drop_last,expected", [
    (10, 3, False, 4), (10, 3, True, 3), (9, 3, False, 3), (9, 3, True, 3),
    (2, 5, False, 1), (2, 5, True, 0), (0, 4, False, 0),
])
def test_count_batches(per_rank, batch, drop_last, expected):
    assert count_batches(per_rank, batch, drop_last) == expected


@pytest.mark.parametrize("n,batch", [(10, 3), (12, 4), (7, 10), (1, 1)])
def test_batch_positions_cover_the_order(n, batch):
    """Batches are consecutive, full except a smaller last one, and cover every position
    (with drop_last: exactly the full batches)."""
    order = np.arange(n, dtype=np.int64)[::-1].copy()
    plan = EpochPlan(order=order, batch_size=batch, drop_last=False)
    positions = [list(plan.batch_positions(i)) for i in range(len(plan))]
    assert sum(positions, []) == list(range(n))
    assert all(len(p) == batch for p in positions[:-1]) and 0 < len(positions[-1]) <= batch
    dropped = EpochPlan(order=order, batch_size=batch, drop_last=True)
    full = [list(dropped.batch_positions(i)) for i in range(len(dropped))]
    assert sum(full, []) == list(range(len(dropped) * batch))
    assert all(len(p) == batch for p in full)


def test_replacement_positions_wrap_around():
    """The candidates for a bad sample are the other positions, next first, wrapping."""
    plan = EpochPlan(order=np.arange(5, dtype=np.int64) * 10, batch_size=2, drop_last=False)
    assert [p % 5 for p in plan.replacement_positions(3)] == [4, 0, 1, 2]
    for pos in range(5):
        assert sorted(p % 5 for p in plan.replacement_positions(pos)) == \
            [q for q in range(5) if q != pos]


@pytest.mark.parametrize("rank,world", [(-1, 2), (2, 2), (5, 3), (0, 0), (0, -1)])
def test_invalid_rank_or_world_size(rank, world):
    with pytest.raises(ValueError, match="rank"):
        rank_order(10, seed=0, epoch=0, shuffle=False, rank=rank, world_size=world)


@pytest.mark.parametrize("batch", [0, -3])
def test_invalid_batch_size(batch):
    with pytest.raises(ValueError, match="batch_size"):
        make_epoch_plan(10, batch_size=batch, seed=0, epoch=0, shuffle=False)
    with pytest.raises(ValueError, match="batch_size"):
        count_batches(10, batch, False)


GROUPS = np.array([0, 1, 0, 1, 1, 0, 0, 1, 0, 1], dtype=np.int64)  # aspect-ratio bucket of each id
SIZES = np.array([4, 6], dtype=np.int64)  # two shards for the streamed and drawn orders


def _layout() -> StreamLayout:
    return StreamLayout(starts=np.array([0, 4, 10], np.int64), shard_bytes=SIZES * 100, canonical_nodes=1,
                        block_bytes=1000)


@pytest.mark.parametrize("other", [
    {"stream": _layout()},
    {"draw": EpochDraw(shard_sizes=SIZES, groups=np.array([0, 1]), weights=(1.0, 2.0))},
    {"draw": EpochDraw(shard_sizes=SIZES, resample=True, epoch_size=20)},
])
def test_buckets_refuse_streaming_weights_and_resampling(other):
    """Each one alone plans; with buckets it is refused (a bucket's batches come from the
    whole dataset, which a streamed block or a drawn epoch does not hold)."""
    kw = dict(batch_size=2, seed=0, epoch=0, shuffle=True)
    assert len(make_epoch_plan(10, **kw, **other).order) > 0
    assert sorted(set(make_epoch_plan(10, **kw, buckets=GROUPS).order.tolist())) == list(range(10))
    with pytest.raises(ValueError, match="buckets do not combine with streaming, weights or resampling"):
        make_epoch_plan(10, **kw, buckets=GROUPS, **other)


@pytest.mark.parametrize("batch", [0, -3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_invalid_batch_size_in_the_bucketed_and_resampled_plans(batch, drop_last):
    """The one-line ValueError, not a ZeroDivisionError from cutting buckets into batches."""
    kw = dict(batch_size=batch, seed=0, epoch=0, shuffle=True, drop_last=drop_last)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        make_epoch_plan(10, **kw, buckets=GROUPS)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        make_epoch_plan(10, **kw, draw=EpochDraw(shard_sizes=SIZES, resample=True, epoch_size=20))


def test_defaults_are_one_rank_taking_the_whole_epoch_from_its_start():
    whole = epoch_permutation(10, seed=1, epoch=2, shuffle=True)
    assert np.array_equal(rank_order(10, seed=1, epoch=2, shuffle=True), whole)
    plan = make_epoch_plan(10, batch_size=4, seed=1, epoch=2, shuffle=True)
    assert np.array_equal(plan.order, whole) and len(plan) == 3 and plan.drop_last is False
    assert list(plan.batch_positions(2)) == [8, 9]
    with pytest.raises(dataclasses.FrozenInstanceError):  # shared by a pass's threads: never changed
        plan.batch_size = 5  # type: ignore[misc]
