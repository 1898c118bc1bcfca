"""plan.resume: the resume state is a small JSON-safe dict, checked field by field; the
world size may change between save and resume (the epoch continues elastically)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from turbofeed.plan import check_state, make_state, plan_fingerprint

FIELDS = {"version", "epoch", "samples_done", "batches_done", "seed", "world_size", "plan"}


def _state(**over):
    args = dict(epoch=3, samples_done=40000, batches_done=1250, seed=0, world_size=8,
                plan=plan_fingerprint(n=100))
    args.update(over)
    return make_state(**args)


def test_state_has_the_documented_fields_and_survives_json():
    state = _state(epoch=np.int64(3), samples_done=np.int64(40000), batches_done=np.int32(1250))
    assert set(state) == FIELDS  # numpy scalars above came out as plain ints
    assert (state["version"], state["epoch"], state["samples_done"], state["batches_done"]) == \
        (2, 3, 40000, 1250)
    assert json.loads(json.dumps(state)) == state
    assert all(isinstance(v, (int, str)) for v in state.values())


def test_matching_state_passes_after_a_json_round_trip():
    """It passes, as it is, at the edge of each counter (a state saved before the first
    batch: all zero); the same state off by one seed or one input is refused, so the
    check is not one that accepts anything."""
    fp = plan_fingerprint(n=100)
    for state in (_state(), _state(epoch=0, samples_done=0, batches_done=0)):
        loaded = json.loads(json.dumps(state))
        assert check_state(loaded, seed=0, plan=fp) is None
        assert loaded == state  # checked, not changed
        with pytest.raises(ValueError, match="'seed' is 0 but this loader has 1"):
            check_state(loaded, seed=1, plan=fp)
        with pytest.raises(ValueError, match="'plan'.*dataset, shuffle or drop_last changed"):
            check_state(loaded, seed=0, plan=plan_fingerprint(n=101))


def test_a_different_world_size_is_accepted():
    """Elastic resume: the consumed prefix, not the rank count, decides where to go on."""
    fp = plan_fingerprint(n=100)
    for world in (8, 3, 1, 1024):
        state = _state(world_size=world)
        assert check_state(state, seed=0, plan=fp) is None and state["world_size"] == world
        # what may differ is the world size only: a state of other data still fails
        with pytest.raises(ValueError, match="'plan'"):
            check_state(state, seed=0, plan=plan_fingerprint(n=100, world_size=world))
        with pytest.raises(ValueError, match="'samples_done' must be a non-negative int"):
            check_state({**state, "samples_done": -world}, seed=0, plan=fp)


@pytest.mark.parametrize("field,value", [
    ("seed", 1), ("plan", "0123456789abcdef"), ("version", 99),
])
def test_mismatch_names_the_field(field, value):
    state = _state()
    state[field] = value
    with pytest.raises(ValueError, match=repr(field)) as info:
        check_state(state, seed=0, plan=plan_fingerprint(n=100))
    others = FIELDS - {field, "epoch", "samples_done", "batches_done", "world_size"}
    assert not any(repr(o) in str(info.value) for o in others)


def test_a_version_1_state_is_refused_saying_why():
    """Version 1 drew crops and flips from random.Random: resuming it here would give other
    pixels than the run that saved it, so it is refused, in one line that says why and what
    to do, naming its epoch; the same state as version 2 passes (only the version differs)."""
    state = {**_state(), "version": 1}
    with pytest.raises(ValueError) as info:
        check_state(state, seed=0, plan=plan_fingerprint(n=100))
    message = str(info.value)
    assert "\n" not in message and "'version' is 1" in message
    assert "counter-based generator" in message and "same pixels" in message
    assert "start epoch 3 again" in message and "older turbofeed" in message
    assert check_state({**state, "version": 2}, seed=0, plan=plan_fingerprint(n=100)) is None


def test_missing_field_is_named():
    state = _state()
    del state["samples_done"]
    with pytest.raises(ValueError, match="samples_done"):
        check_state(state, seed=0, plan=plan_fingerprint(n=100))


@pytest.mark.parametrize("field", ["epoch", "samples_done", "batches_done"])
@pytest.mark.parametrize("value", [-1, "12", 1.5])
def test_counters_must_be_non_negative_ints(field, value):
    state = _state()
    state[field] = value
    with pytest.raises(ValueError, match=repr(field)):
        check_state(state, seed=0, plan=plan_fingerprint(n=100))


def test_fingerprint_is_stable_and_order_independent():
    a = plan_fingerprint(n=100, seed=0, batch_size=32, shuffle=True, sources=[["s0.tar", 40]])
    b = plan_fingerprint(sources=[["s0.tar", 40]], shuffle=True, batch_size=32, seed=0, n=100)
    assert a == b and len(a) == 16 and int(a, 16) >= 0


def test_fingerprint_is_stable_across_processes():
    """Unlike hash(), it does not change with the interpreter's hash seed."""
    code = "from turbofeed.plan import plan_fingerprint; print(plan_fingerprint(n=5, s=['a']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123"}).stdout.strip()
    assert out == plan_fingerprint(n=5, s=["a"])


@pytest.mark.parametrize("change", [
    {"n": 101}, {"seed": 1}, {"batch_size": 64}, {"shuffle": False},
    {"drop_last": True}, {"sources": [["s1.tar", 40]]}, {"sources": [["s0.tar", 41]]},
])
def test_fingerprint_changes_with_any_input(change):
    base = dict(n=100, seed=0, batch_size=32, shuffle=True, drop_last=False,
                sources=[["s0.tar", 40]])
    assert plan_fingerprint(**base) != plan_fingerprint(**{**base, **change})
