"""Iteration semantics, as torch.utils.data.DataLoader (DESIGN.md "Iteration semantics"):
each iter() starts an epoch from its beginning (but the first one after load_state_dict),
set_epoch is sticky, two iterators of one loader run independently."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from resume_check import check_resume

import turbofeed
from turbofeed import transforms as T

KW = dict(batch_size=9, num_workers=2, transform=T.imagenet_eval(16), return_keys=True)
STEPS = 14  # 120 samples / 9 -> 13 full + 1 of 3


def loader_for(shards, **kw):
    return turbofeed.DataLoader(shards, **{**KW, **kw})


def keys_of(batches) -> list[str]:
    return [k for _, _, ks in batches for k in ks]


def position(loader) -> tuple[int, int, int]:
    s = loader.state_dict()
    return s["epoch"], s["samples_done"], s["batches_done"]


@pytest.mark.parametrize("shuffle", [False, True])
def test_zip_with_range_len_runs_every_epoch_in_full(shards, shuffle):
    """``for step, batch in zip(range(len(loader)), loader)`` never calls next() after the
    last batch; every epoch still has len(loader) steps (not 13, 0, 13, 0)."""
    loader = loader_for(shards, shuffle=shuffle)
    assert len(loader) == STEPS
    orders = []
    for epoch in range(4):
        batches = [batch for _, batch in zip(range(len(loader)), loader)]
        assert len(batches) == STEPS, epoch
        keys = keys_of(batches)
        assert len(keys) == 120 and len(set(keys)) == 120
        orders.append(keys)
        assert position(loader) == (epoch + 1, 0, 0)  # a delivered epoch is a finished one
    if shuffle:
        assert len({tuple(o) for o in orders}) == 4  # each iteration takes the next epoch


def test_a_peeked_batch_does_not_shorten_the_epoch(shards):
    loader = loader_for(shards)
    _, _, peeked = next(iter(loader))
    batches = list(loader)
    assert len(batches) == STEPS
    keys = keys_of(batches)
    assert Counter(keys) == Counter(set(keys)) and len(keys) == 120
    assert set(peeked) <= set(keys)


def test_an_abandoned_iteration_does_not_shorten_the_next(shards):
    loader = loader_for(shards, shuffle=True)
    for i, _ in enumerate(loader):
        if i == 4:
            break
    assert position(loader) == (0, 45, 5)  # the abandoned pass: epoch 0, 5 batches in
    batches = list(loader)  # the next epoch, from its beginning
    assert len(batches) == STEPS and len(set(keys_of(batches))) == 120
    assert position(loader) == (2, 0, 0)


def test_set_epoch_is_sticky_and_repeats_the_same_epoch(shards):
    loader = loader_for(shards, shuffle=True)
    loader.set_epoch(5)
    first = keys_of(list(loader))
    it = iter(loader)
    next(it)  # abandoned after one batch
    del it
    second = keys_of(list(loader))
    assert first == second and len(first) == 120
    fresh = loader_for(shards, shuffle=True)
    fresh.set_epoch(5)
    assert keys_of(list(fresh)) == first


def test_only_the_first_iteration_after_load_state_dict_resumes(shards):
    """Resumed 4 batches into epoch 0: the first iteration is the rest of epoch 0, the next
    one all of epoch 1 (not a resume again), as in the uninterrupted run."""
    (run,) = check_resume(lambda: loader_for(shards, shuffle=True), stops=[4], epochs=2).runs
    assert len(run.tail) == 2 * STEPS - 4
    assert (run.state["epoch"], run.state["samples_done"], run.state["batches_done"]) == (0, 36, 4)
    assert (run.end["epoch"], run.end["samples_done"], run.end["batches_done"]) == (2, 0, 0)
    resumed = loader_for(shards, shuffle=True)
    resumed.load_state_dict(run.state)
    assert position(resumed) == (0, 36, 4)


@pytest.mark.parametrize("world", [(2, 2), (2, 3), (1, 1)])
def test_len_after_load_state_dict_counts_what_the_resumed_pass_yields(shards, world):
    """tqdm and Lightning read len(loader): it counted the whole epoch, though the resumed
    pass yields only the rest (issue 37 #10). Same and other world sizes (elastic)."""
    saved_world, new_world = world
    for drop_last in (False, True):
        source = loader_for(shards, shuffle=True, rank=0, world_size=saved_world, drop_last=drop_last)
        it = iter(source)
        for _ in range(4):
            next(it)
        state = source.state_dict()
        del it
        resumed = loader_for(shards, shuffle=True, rank=0, world_size=new_world, drop_last=drop_last)
        full = len(resumed)
        resumed.load_state_dict(state)
        rest = len(resumed)
        assert rest == len(list(resumed)) < full
        assert len(resumed) == full  # the pass after it runs a whole epoch
        resumed.load_state_dict(state)
        resumed.set_epoch(state["epoch"] + 1)  # another epoch cancels the resume
        assert len(resumed) == full and len(resumed.batch_sampler) == full


def test_a_resume_interrupted_by_a_peek_does_not_resume_twice(shards):
    source = loader_for(shards)
    it = iter(source)
    for _ in range(10):
        next(it)
    state = source.state_dict()
    del it
    resumed = loader_for(shards)
    resumed.load_state_dict(state)
    it = iter(resumed)
    next(it)  # batch 10 of epoch 0
    assert position(resumed) == (0, 99, 11)
    del it
    assert len(list(resumed)) == STEPS  # a new iteration: a whole epoch


def test_state_dict_follows_the_live_iteration(shards):
    loader = loader_for(shards)
    assert position(loader) == (0, 0, 0)
    it = iter(loader)
    for _ in range(3):
        next(it)
    assert position(loader) == (0, 27, 3)
    for _ in it:
        pass
    assert position(loader) == (1, 0, 0)
    loader.set_epoch(7)
    assert position(loader) == (7, 0, 0)


def test_two_threads_iterate_one_loader_independently(shards):
    """As torch's DataLoader: a second thread's iter() is a pass of its own; neither
    loses or repeats a batch of the other (issue 27)."""
    loader = loader_for(shards)
    started, may_finish = threading.Event(), threading.Event()
    got: dict = {}

    def consumer() -> None:
        it = iter(loader)
        first = [next(it)]
        started.set()
        may_finish.wait(30)
        got["batches"] = first + list(it)

    worker = threading.Thread(target=consumer)
    worker.start()
    try:
        assert started.wait(30)
        mine = list(loader)  # while the other thread's pass is live
    finally:
        may_finish.set()
        worker.join(30)
    batches = got["batches"]
    assert len(batches) == STEPS and len(set(keys_of(batches))) == 120
    assert len(mine) == STEPS and len(set(keys_of(mine))) == 120


def test_an_abandoned_iterator_of_a_finished_thread_still_works(shards):
    loader = loader_for(shards)
    kept: list = []

    def abandon() -> None:
        it = iter(loader)
        next(it)
        kept.append(it)  # still referenced, but its thread ends

    t = threading.Thread(target=abandon)
    t.start()
    t.join(30)
    batches = list(loader)
    assert len(batches) == STEPS
    assert len(list(kept[0])) == STEPS - 1  # its own pass goes on


def test_load_state_dict_supersedes_running_iterators(shards):
    loader = loader_for(shards)
    old = iter(loader)
    next(old)
    new = iter(loader)
    next(new)
    state = loader.state_dict()
    loader.load_state_dict(state)
    for it in (old, new, old):  # every later use says why, rather than ending the epoch silently
        with pytest.raises(RuntimeError, match=r"superseded by load_state_dict\(\)"):
            next(it)
    assert len(list(loader)) == STEPS - 1  # the resumed pass


def test_set_epoch_during_an_iteration_applies_to_the_next_one(shards):
    loader = loader_for(shards, shuffle=True)
    it = iter(loader)
    head = [next(it)]
    loader.set_epoch(9)
    rest = list(it)  # the running pass goes on to its end
    assert len(head) + len(rest) == STEPS
    assert len(set(keys_of(head + rest))) == 120
    reference = loader_for(shards, shuffle=True)
    reference.set_epoch(9)
    assert keys_of(list(loader)) == keys_of(list(reference))
