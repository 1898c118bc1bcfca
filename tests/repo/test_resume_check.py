"""tests/resume_check.py, the shared resume check: it passes a plan that resumes exactly, at
every stop and across epochs, and fails one that does not, naming the stop and the first
step and position that differ; elastic resumes are compared by each epoch's samples."""

from __future__ import annotations

from functools import partial

import pytest
from resume_check import PLAN, PlanRun, check_resume

from turbofeed.plan import rank_order


def ranks(skip: int = 0):
    """``rank_order`` of 120 samples as PlanRun asks for it; ``skip``: a resume that skips
    that many samples past its start."""
    def order(rank, world_size, epoch, start):
        return rank_order(120, seed=1, epoch=epoch, shuffle=True, rank=rank, world_size=world_size,
                          start=start + skip if start else start)
    return order


def test_an_exact_resume_passes_at_every_stop_and_the_state_rolls_over_at_an_epochs_end():
    four = partial(PlanRun, ranks(), world_size=4, batch_size=5)  # 6 global batches an epoch
    result = check_resume(four, stops=range(13), epochs=2, kind=PLAN)
    assert len(result.epochs) == 2 and [len(e) for e in result.epochs] == [6, 6]
    assert sorted(i for step in result.epochs[1] for i in step) == list(range(120))
    assert [(run.epoch, run.step) for run in result.runs[5:8]] == [(0, 5), (0, 6), (1, 1)]
    assert [run.state for run in result.runs[5:8]] == [{"epoch": 0, "samples_done": 100},
                                                      {"epoch": 1, "samples_done": 0},
                                                      {"epoch": 1, "samples_done": 20}]
    assert all(run.steps == result.steps and run.end == {"epoch": 2, "samples_done": 0} for run in result.runs)
    assert check_resume(four, stops=[-1], kind=PLAN).runs[0].stop == 5


def test_a_resume_that_skips_a_sample_fails_naming_the_stop_and_the_position():
    broken = partial(PlanRun, ranks(skip=1), world_size=4, batch_size=5)
    with pytest.raises(AssertionError, match=r"^stop 2 \(epoch 0, after step 2 of 6\): the resumed run differs "
                                             r"at step 2 \(epoch 0, step 2\), position 0: "):
        check_resume(broken, stops=[0, 2], kind=PLAN)
    with pytest.raises(AssertionError, match=r"^stop 8 \(epoch 1, after step 2 of 6\): epoch 1: 1 keys lost"):
        check_resume(broken, stops=[8], epochs=2, kind=PLAN, elastic=True)


def test_an_elastic_resume_is_every_sample_of_the_epoch_up_to_the_padding_allowed():
    four = partial(PlanRun, ranks(), world_size=4, batch_size=5)
    three = partial(PlanRun, ranks(), world_size=3, batch_size=5)  # 80 left: 27 a rank, 1 padded
    result = check_resume(four, stops=[2, 6, 8], epochs=2, kind=PLAN, then=three, elastic=True, may_repeat=1)
    assert [len(run.tail) for run in result.runs] == [6 + 8, 8, 6]  # 27 a rank: 6 steps; 40: 8
    with pytest.raises(AssertionError, match=r"1 more than in the uninterrupted epoch \(at most 0\)"):
        check_resume(four, stops=[2], kind=PLAN, then=three, elastic=True)
    with pytest.raises(AssertionError, match=r"the resumed run differs at step 2"):
        check_resume(four, stops=[2], kind=PLAN, then=three)  # exact: other batches
