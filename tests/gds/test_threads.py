"""The gds client on the one executor: chunks on ``turbofeed-gds-<i>`` threads, async
operations on ``turbofeed-gds-op-<i>``, both :class:`turbofeed.base.executor.Executor`
threads started at first use; closing in the middle of a many-chunk transfer cancels what
is queued, stops the rest between chunks and never hangs."""

from __future__ import annotations

import re
import threading
import time

import pytest

from turbofeed.base.executor import Executor
from turbofeed.gds import GDSConfig, GDSError, GPUDirectClient

pytest.importorskip("torch")  # the stand-in device buffer is a CPU tensor

DEPTH = 3
CONFIG = dict(enabled=False, max_transfer_size="1K", buffer_pool_size="3K", queue_depth=DEPTH)


def gds_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.name.startswith("turbofeed-gds-")]


def recording(helpers, size: int, delay: float = 0.0):
    """A stand-in device buffer that notes the thread of every chunk's copy (and takes
    ``delay`` seconds per chunk, so a transfer lasts long enough to be closed in the middle)."""
    class Recording(helpers.StandIn):
        def __init__(self) -> None:
            super().__init__(size)
            self.threads: list[str] = []

        def upload(self, pos, staging, n):
            self.threads.append(threading.current_thread().name)
            time.sleep(delay)
            super().upload(pos, staging, n)
    return Recording()


def test_threads_are_named_executor_threads_started_at_first_use(helpers, tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(helpers.payload(20 << 10, seed=3).tobytes())
    before = set(threading.enumerate())
    client = GPUDirectClient(config=GDSConfig(**CONFIG))
    assert isinstance(client._transfers.executor, Executor) and isinstance(client._ops, Executor)
    one = recording(helpers, 1024)
    client.read_file_to_gpu(path, one, size=1024)  # one chunk: the caller's thread, no thread started
    assert one.threads == [threading.current_thread().name] and gds_threads(before) == []

    many = recording(helpers, 20 << 10)
    assert client.async_read_file(path, many).result(timeout=60) == 20 << 10
    assert len(many.threads) == 20 and all(re.fullmatch(r"turbofeed-gds-\d", name) for name in many.threads)
    names = sorted(t.name for t in gds_threads(before))
    assert names == sorted([f"turbofeed-gds-{i}" for i in range(DEPTH)]
                           + [f"turbofeed-gds-op-{i}" for i in range(DEPTH)])
    assert all(t.daemon for t in gds_threads(before))
    client._ops.close()  # closed between the client's own check and the submit: still a GDSError
    with pytest.raises(GDSError, match="the client is closed"):
        client.async_read_file(path, many)
    client.close()
    assert gds_threads(before) == []
    with pytest.raises(GDSError, match="the client is closed"):
        client.async_read_file(path, many)


def test_close_during_a_many_chunk_transfer_cancels_without_hanging(helpers, tmp_path):
    chunks = 1000
    path = tmp_path / "big.bin"
    path.write_bytes(helpers.payload(chunks << 10, seed=4).tobytes())
    before = set(threading.enumerate())
    client = GPUDirectClient(config=GDSConfig(**CONFIG))
    buf = recording(helpers, chunks << 10, delay=0.01)  # 1000 chunks, 3 at a time: ~3.3 s whole
    # DEPTH running async reads and two queued behind them
    queued = [client.async_read_file(path, recording(helpers, chunks << 10, delay=0.01))
              for _ in range(DEPTH + 2)]
    closer = threading.Timer(0.3, client.close)
    started = time.monotonic()
    closer.start()
    with pytest.raises(GDSError, match="closed during the transfer"):
        client.read_file_to_gpu(path, buf)
    closer.join(10)
    elapsed = time.monotonic() - started
    assert not closer.is_alive() and elapsed < 3, elapsed  # close returned, the transfer stopped early
    assert len(buf.threads) < chunks
    for future in queued:  # each was running (stopped between chunks) or queued (cancelled)
        assert future.done()
        if not future.cancelled():
            with pytest.raises(GDSError, match="closed"):
                future.result(timeout=0)
    assert gds_threads(before) == []
