"""The slot lifecycle: a slot is reused only after the consumer let go of its batch,
through an explicit handle, never by peeking at reference counts."""

from __future__ import annotations

import gc
import inspect
import subprocess
import sys

import numpy as np
import pytest
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


def test_capacity_zero_still_keeps_one_slot_for_reuse():
    pool = make_pool(capacity=0)
    a = pool.acquire()
    pool.release(a)
    assert pool.free() == 1 and pool.acquire() is a and pool.allocated == 1


def test_capacity_bounds_the_slots_that_come_back_through_dead_handles():
    pool = make_pool(capacity=1)
    a, b = pool.acquire(), pool.acquire()
    views = [a.lend(2), b.lend(2)]
    del views  # both handles die: both slots come back at the next acquire, one is kept
    assert pool.acquire() in (a, b)
    assert pool.free() == 0  # the other was dropped, not kept beside it
    assert pool.acquire() not in (a, b) and pool.allocated == 3


def test_a_slot_without_a_pool_lends_a_plain_view():
    slot = slots.Slot(np.arange(6, dtype=np.uint8).reshape(3, 2), np.zeros(3, np.int64))
    assert slot.lend(2).tolist() == [[0, 1], [2, 3]]


def test_each_layout_and_dtype_has_its_own_pool_of_the_right_shape():
    pools = slots.SlotPools(batch_size=5, size=(7, 9), pinned=False, capacity=2)
    last, first = pools(np.uint8, True), pools(np.float16, False)
    assert pools(np.uint8, True) is last and pools(np.dtype("float16"), False) is first  # kept across passes
    assert pools(np.float16, True) is not last and len(pools.pools) == 3
    for pool, shape, dtype in ((last, (5, 7, 9, 3), np.uint8), (first, (5, 3, 7, 9), np.float16)):
        slot = pool.acquire()
        assert slot.images.shape == shape and slot.images.dtype == dtype
        assert slot.labels.shape == (5,) and slot.labels.dtype == np.int64
        assert slot.pool is pool
    spare = [last.acquire() for _ in range(3)]
    for slot in spare:
        last.release(slot)
    assert last.free() == 2  # capacity= reaches every pool


def test_the_torch_dtypes_of_pinned_slots():
    assert {n: get() for n, get in slots._TORCH_DTYPES.items()} == {
        "uint8": torch.uint8, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_pinned_slots_are_page_locked():
    array = slots.make_array((2, 3, 4, 4), np.dtype("float16"), pin=True)
    assert array.shape == (2, 3, 4, 4) and array.dtype == np.float16
    assert torch.from_numpy(array).is_pinned()


def test_importing_the_slots_does_not_import_torch():
    # torch is imported where a pinned slot is made, never by the import (docs: engine/__init__)
    code = "import sys, turbofeed.engine.slots; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
