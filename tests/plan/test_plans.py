"""The registry of sampling plans (issue 38, item 4): ``make_epoch_plan`` asks
``plan.PLANS`` which plan makes an epoch; for each loader option the loader builds the
plan it built before the registry (the order's type, blocks, groups)."""

from __future__ import annotations

import numpy as np
import pytest

import turbofeed
from turbofeed.plan import PLANS, PlanRequest, make_epoch_plan
from turbofeed.plan.plans import choose
from turbofeed.plan.resampled import ResampledRankOrder
from turbofeed.plan.stream_rounds import RoundsRankOrder
from turbofeed.transforms import BucketResize, Compose

BUCKETS = [(32, 32), (24, 48), (48, 24)]


def request(loader) -> PlanRequest:
    """The request the loader's ``_plan`` hands ``make_epoch_plan``."""
    return PlanRequest(loader.dataset.num_samples, batch_size=loader.batch_size, seed=loader.seed, epoch=0,
                       shuffle=loader.shuffle, rank=loader.rank, world_size=loader.world_size,
                       drop_last=loader.drop_last, stream=loader.stream_layout, draw=loader.draw,
                       buckets=None if loader.buckets is None else loader.buckets.groups)


def half(shard_paths):
    n = len(shard_paths) // 2
    return turbofeed.Dataset(shard_paths[:n]), turbofeed.Dataset(shard_paths[n:])


CASES = {
    "order": lambda paths: turbofeed.DataLoader(paths, batch_size=4, shuffle=True),
    "weighted order": lambda paths: turbofeed.DataLoader(turbofeed.mix(half(paths), weights=[3, 1]),
                                                         batch_size=4),
    "resampled": lambda paths: turbofeed.DataLoader(turbofeed.mix(half(paths), weights=[1, 1], resample=True,
                                                                  epoch_size=50), batch_size=4),
    "streamed": lambda paths: turbofeed.DataLoader(turbofeed.Dataset(paths, streaming=True), batch_size=4,
                                                   shuffle=True),
    "resampled streamed": lambda paths: turbofeed.DataLoader(
        turbofeed.mix([turbofeed.Dataset(d.data, streaming=True) for d in half(paths)], weights=[1, 1],
                      resample=True, epoch_size=50), batch_size=4),
    "buckets": lambda paths: turbofeed.DataLoader(paths, batch_size=4, shuffle=True, buckets=BUCKETS,
                                                  transform=Compose([BucketResize(BUCKETS)])),
}
#: case -> (the plan chosen, the type of its order, blocks held, groups held)
EXPECTED = {
    "order": ("order", np.ndarray, False, False),
    "weighted order": ("order", np.ndarray, False, False),
    "resampled": ("resampled", ResampledRankOrder, False, False),
    "streamed": ("streamed", np.ndarray, True, False),
    "resampled streamed": ("resampled-rounds", RoundsRankOrder, False, False),
    "buckets": ("buckets", np.ndarray, False, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_loader_option_picks_its_plan(case, shard_paths):
    loader = CASES[case](shard_paths)
    name, order_type, blocks, groups = EXPECTED[case]
    assert choose(request(loader)).name == name
    plan = loader.planner.plan(0)
    assert type(plan.order) is order_type
    assert (plan.blocks is not None, plan.groups is not None) == (blocks, groups)
    assert len(plan) == len(loader)
    built = make_epoch_plan(**{f: getattr(request(loader), f) for f in PlanRequest.__dataclass_fields__})
    assert list(built.order[:8]) == list(plan.order[:8])  # the registry's plan is the loader's


def test_the_rows_are_asked_in_order_and_the_last_takes_anything():
    assert [p.name for p in PLANS] == ["buckets", "resampled", "resampled-rounds", "streamed", "order"]
    assert choose(PlanRequest(10, batch_size=2, seed=0, epoch=0, shuffle=False)).name == "order"


def test_buckets_still_refuse_a_draw_or_a_stream():
    with pytest.raises(ValueError, match="do not combine"):
        make_epoch_plan(4, batch_size=2, seed=0, epoch=0, shuffle=False, buckets=np.zeros(4, np.int64),
                        stream=object())  # type: ignore[arg-type]
