"""gds.memory, gds.buffers, gds.transfers: buffers as flat bytes without copies, the bounded
staging pool, and chunked transfers that stop cleanly."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from turbofeed.gds import GDSError, HostBuffer, StagingPool, as_buffer
from turbofeed.gds.transfers import Transfers


# ----- buffers -------------------------------------------------------------------------
def test_numpy_arrays_are_views_of_their_bytes():
    arr = np.zeros((3, 5), dtype=np.float32)
    buf = as_buffer(arr, writable=True)
    assert isinstance(buf, HostBuffer) and buf.nbytes == 60 and "float32" in buf.what
    buf.view[:4] = np.float32(2.5).tobytes()
    assert arr[0, 0] == 2.5


def test_host_buffer_kinds():
    ba = bytearray(10)
    as_buffer(ba, writable=True).view[3] = 7
    assert ba[3] == 7
    mv = memoryview(bytearray(8)).cast("I")  # 2 uint32 -> 8 bytes
    assert as_buffer(mv, writable=True).nbytes == 8
    assert as_buffer(b"abc", writable=False).nbytes == 3
    assert as_buffer(np.zeros(()), writable=False).nbytes == 8  # 0-d array


def test_torch_cpu_tensors_share_memory():
    torch = pytest.importorskip("torch")
    t = torch.zeros(4, dtype=torch.int16)
    as_buffer(t, writable=True).view[2:4] = (513).to_bytes(2, "little")
    assert t[1].item() == 513
    b = torch.zeros(3, dtype=torch.bool)
    as_buffer(b, writable=True).view[1] = 1
    assert b.tolist() == [False, True, False]
    leaf = torch.zeros(2, requires_grad=True)  # reading into a leaf is allowed (no autograd)
    assert as_buffer(leaf, writable=True).nbytes == 8


@pytest.mark.parametrize("make, words", [
    (lambda: np.zeros((4, 4))[:, 1], "C-contiguous"),
    (lambda: np.array([object(), 1]), "Python objects"),
    (lambda: memoryview(bytearray(8))[::2], "C-contiguous"),
    (lambda: 12345, "unsupported buffer builtins.int"),
])
def test_unusable_buffers_are_refused(make, words):
    with pytest.raises(GDSError, match=words):
        as_buffer(make(), writable=False)


def test_read_only_buffers_cannot_be_read_into():
    with pytest.raises(GDSError, match="read-only"):
        as_buffer(b"immutable", writable=True)
    arr = np.zeros(4)
    arr.flags.writeable = False
    with pytest.raises(GDSError, match="read-only"):
        as_buffer(arr, writable=True)


def test_non_contiguous_tensor_is_refused_not_copied():
    torch = pytest.importorskip("torch")
    with pytest.raises(GDSError, match=r"contiguous.*t.contiguous\(\)"):
        as_buffer(torch.zeros(4, 4).t(), writable=True)


# ----- staging pool --------------------------------------------------------------------
def test_pool_is_bounded_lazy_and_reuses_buffers():
    pytest.importorskip("torch")
    pool = StagingPool(count=2, size=1024, pinned=False)
    assert pool.stats()["allocated"] == 0
    with pool.acquire() as a:
        a.view[:3] = b"abc"
        assert a.size == 1024 and a.tensor.numel() == 1024
    with pool.acquire() as b:
        assert b is a  # kept, not reallocated
    got = threading.Event()
    with pool.acquire(), pool.acquire():
        assert pool.stats()["lent"] == 2

        def third():
            with pool.acquire():
                got.set()
        t = threading.Thread(target=third)
        t.start()
        time.sleep(0.3)
        assert not got.is_set()  # both lent: the third waits
    t.join(5)
    assert got.is_set()
    stats = pool.stats()
    assert stats["allocated"] == 2 and stats["peak_lent"] == 2 and stats["waits"] == 1 and stats["lent"] == 0
    pool.close()


def test_closing_the_pool_wakes_a_waiter_with_an_error():
    pytest.importorskip("torch")
    pool = StagingPool(count=1, size=16, pinned=False)
    errors = []
    with pool.acquire():
        def waiter():
            try:
                with pool.acquire():
                    pass
            except GDSError as exc:
                errors.append(exc)
        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.2)
        pool.close()
        t.join(2)
    assert not t.is_alive() and "closed" in str(errors[0])


# ----- chunked transfers ---------------------------------------------------------------
def test_chunks_cover_the_range_within_the_depth():
    before = set(threading.enumerate())
    stop = threading.Event()
    transfers = Transfers(3, stop)
    seen, running, peak = [], [0], [0]
    lock = threading.Lock()

    def chunk(pos, n):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            seen.append((pos, n, threading.current_thread().name))
        time.sleep(0.02)
        with lock:
            running[0] -= 1
    transfers.run(chunk, 1000, 64)
    assert sorted((p, n) for p, n, _ in seen) == [(p, min(64, 1000 - p)) for p in range(0, 1000, 64)]
    assert peak[0] <= 3 and all(name.startswith("turbofeed-gds-") for _, _, name in seen)
    transfers.close()
    assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("turbofeed-gds-")]


def test_first_error_stops_the_rest_and_waits_for_running_chunks():
    transfers = Transfers(2, threading.Event())
    finished = []

    def chunk(pos, n):
        if pos == 10:
            raise OSError("disk on fire")
        time.sleep(0.05)
        finished.append(pos)
    with pytest.raises(OSError, match="disk on fire"):
        transfers.run(chunk, 10 * 100, 10)
    after = len(finished)
    time.sleep(0.2)
    assert len(finished) == after < 100  # nothing still running once run() raised
    transfers.close()


def test_close_stops_a_transfer_between_chunks():
    stop = threading.Event()
    transfers = Transfers(2, stop)
    started = []

    def chunk(pos, n):
        started.append(pos)
        time.sleep(0.05)
    closer = threading.Timer(0.2, transfers.close)
    closer.start()
    with pytest.raises(GDSError, match="closed"):
        transfers.run(chunk, 1000, 1)
    closer.join()
    assert len(started) < 1000
