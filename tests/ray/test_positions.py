"""The positions of an epoch on Ray (turbofeed/ray/positions.py, read.merged): consumed
sets, the ranges still to read, the trainers' states merged; no Ray needed."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("ray.data", reason="turbofeed[ray] is not installed")

from turbofeed.ray import Consumed, merged  # noqa: E402
from turbofeed.ray.positions import read_ranges, runs_of  # noqa: E402
from turbofeed.ray.read import STATE_VERSION  # noqa: E402


def state(epoch: int, runs) -> dict:
    return {"version": STATE_VERSION, "epoch": epoch, "consumed": [list(r) for r in runs]}


def test_consumed_positions_are_runs_whatever_order_they_came_in():
    consumed = Consumed()
    rng = np.random.default_rng(0)
    for part in np.array_split(rng.permutation(np.r_[0:10, 20:25]), 4):
        consumed.add(part)
    assert consumed.runs() == [(0, 10), (20, 25)] and len(consumed) == 15
    assert Consumed(consumed.runs()).runs() == consumed.runs()


def test_the_ranges_left_are_the_complement_cut_to_size():
    consumed = Consumed([(0, 3), (5, 6), (9, 20)])
    ranges = read_ranges(12, consumed, per_range=2)
    assert ranges == [(3, 5), (6, 8), (8, 9)]
    left = np.concatenate([np.arange(a, b) for a, b in ranges])
    assert sorted(left.tolist() + np.flatnonzero(consumed.mask(12)).tolist()) == list(range(12))
    assert read_ranges(5, Consumed(), per_range=10) == [(0, 5)]
    assert read_ranges(4, Consumed([(0, 4)]), per_range=1) == []
    with pytest.raises(ValueError, match="per_range"):
        read_ranges(4, Consumed(), per_range=0)


def test_states_of_several_trainers_merge_into_one_set():
    a, b = state(2, [(0, 4), (10, 12)]), state(2, [(4, 6)])
    both = merged(json.loads(json.dumps([a, b])), epoch=2)
    assert both.runs() == [(0, 6), (10, 12)]
    assert merged(a, epoch=2).runs() == [(0, 4), (10, 12)]
    with pytest.raises(ValueError, match="a state of epoch 2 cannot resume epoch 3"):
        merged([a], epoch=3)
    with pytest.raises(ValueError, match="version"):
        merged([{**a, "version": 99}], epoch=2)


def test_runs_of_marks():
    assert runs_of(np.array([], bool)) == []
    assert runs_of(np.array([1, 1, 0, 1], bool)) == [(0, 2), (3, 4)]
    with pytest.raises(ValueError, match=">= 0"):
        Consumed().add(np.array([-1]))
