"""Reused host buffers of chunks' bytes (engine/byte_buffers.py): reused only once given
back and their device work is done, the smallest that fits, a bounded free list (the
GPU feed's use of them: tests/engine/test_chunks.py)."""

from __future__ import annotations

import numpy as np
import pytest

from turbofeed.engine.byte_buffers import ByteBuffers


class Event:
    """Stands in for a ``torch.cuda.Event`` (no CUDA device on the machines the tests
    run on): ``query()`` says whether the work before it is done."""

    def __init__(self, done: bool) -> None:
        self.done = done

    def query(self) -> bool:
        return self.done


def test_a_buffer_given_back_is_handed_out_again():
    pool = ByteBuffers()
    a = pool.take(1000)
    assert a.dtype == np.uint8 and a.shape == (1000,) and a.flags.writeable
    a[:] = 7
    pool.give([a])
    b = pool.take(900)
    assert b.shape == (900,) and np.shares_memory(a, b) and pool.made == 1


def test_a_buffer_out_is_never_handed_out_twice():
    pool = ByteBuffers()
    a, b = pool.take(100), pool.take(100)
    assert not np.shares_memory(a, b) and pool.made == 2


def test_a_buffer_waits_for_its_device_work():
    pool = ByteBuffers()
    a = pool.take(1 << 16)
    event = Event(done=False)
    pool.give([a], event)
    b = pool.take(1 << 16)  # the copy from ``a`` may still be queued: a new buffer
    assert not np.shares_memory(a, b) and pool.made == 2
    event.done = True
    c = pool.take(1 << 16)
    assert np.shares_memory(a, c) and pool.made == 2


def test_the_smallest_buffer_that_fits_is_taken():
    pool = ByteBuffers()
    small, large = pool.take(3 << 20), pool.take(9 << 20)
    pool.give([large, small])
    assert np.shares_memory(pool.take(2 << 20), small)
    assert np.shares_memory(pool.take(2 << 20), large)  # the small one is out


def test_a_larger_request_than_any_free_buffer_makes_a_new_one():
    pool = ByteBuffers()
    a = pool.take(1 << 20)
    pool.give([a])
    b = pool.take(4 << 20)
    assert b.shape == (4 << 20,) and not np.shares_memory(a, b) and pool.made == 2


def test_the_free_list_holds_no_more_than_were_ever_out_at_once():
    pool = ByteBuffers()
    views = [pool.take(1 << 20) for _ in range(3)]
    pool.give(views)
    for size in (5, 9, 13):  # each larger than every free buffer: one more each time
        pool.give([pool.take(size << 20)])
        assert len(pool) <= 3
    assert pool.made == 6
    assert pool.take(12 << 20).shape == (12 << 20,) and pool.made == 6  # the largest were kept


def test_only_views_it_handed_out_come_back():
    with pytest.raises(AssertionError, match="ByteBuffers.take"):
        ByteBuffers().give([np.empty(10, np.uint8)])
