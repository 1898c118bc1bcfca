"""The slot lifecycle: a slot is reused only after the consumer let go of its batch,
through an explicit handle, never by peeking at reference counts."""

from __future__ import annotations

import gc
import inspect

import numpy as np
import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.engine import slots
from turbofeed.engine.slots import SlotPool


def make_pool(capacity: int = 4) -> SlotPool:
    return SlotPool(lambda: (np.zeros((2, 3), np.uint8), np.zeros(2, np.int64)), capacity)


def test_a_lent_slot_comes_back_only_when_every_tensor_over_it_is_gone():
    pool = make_pool()
    slot = pool.acquire()
    images = torch.from_numpy(slot.lend(2))
    view = images[1:]  # a view shares the storage: it keeps the slot out too
    del images
    gc.collect()
    assert pool.acquire() is not slot and pool.allocated == 2
    del view
    assert pool.acquire() is slot  # no gc needed: the handle died with the storage
    assert pool.allocated == 2


def test_a_released_slot_is_reused_and_capacity_bounds_the_free_list():
    pool = make_pool(capacity=1)
    a, b = pool.acquire(), pool.acquire()
    pool.release(a)
    pool.release(b)  # over capacity: dropped
    assert pool.free() == 1
    assert pool.acquire() is a
    assert pool.acquire() is not b


def test_no_reference_count_peeking():
    assert "getrefcount" not in inspect.getsource(slots)


def test_kept_batches_never_change_and_slots_are_reused_when_dropped(shards):
    loader = turbofeed.DataLoader(shards, batch_size=8, num_workers=2, prefetch=2, transform=T.imagenet_eval(32))
    kept = [x for x, _ in loader]
    copies = [x.clone() for x in kept]
    for x, _ in loader:  # a second epoch while the first one's batches are all kept
        pass
    assert all(torch.equal(a, b) for a, b in zip(kept, copies))
    (pool,) = loader._slot_pool.pools.values()
    grown = pool.allocated
    assert grown >= len(kept)
    del kept, x
    for x, _ in loader:  # nothing kept now: the freed slots serve this epoch
        del x
    assert pool.allocated == grown
