"""Break, exceptions, garbage collection, Ctrl-C and interpreter exit never hang or leak threads."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import turbofeed
from turbofeed import transforms as T


def turbofeed_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("turbofeed-") and t.is_alive()]


def wait_for_no_threads(timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while turbofeed_threads() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return turbofeed_threads()


@pytest.fixture(autouse=True)
def _no_threads_before():
    assert wait_for_no_threads() == []


def test_threads_are_named_by_stage(shards):
    it = iter(turbofeed.DataLoader(shards, batch_size=8, num_workers=3, transform=T.imagenet_eval(32)))
    next(it)
    assert sorted(turbofeed_threads()) == [f"turbofeed-decode.cpu-{i}" for i in range(3)]
    it.close()
    assert turbofeed_threads() == []


def test_break_out_of_the_loop_stops_the_threads(shards):
    loader = turbofeed.DataLoader(shards, batch_size=8, num_workers=2, transform=T.imagenet_eval(32))
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert wait_for_no_threads() == []


def test_two_iterators_run_their_own_threads_and_dropping_them_stops_them(shards):
    loader = turbofeed.DataLoader(shards, batch_size=8, num_workers=2, transform=T.imagenet_eval(32))
    first = iter(loader)
    next(first)
    second = iter(loader)  # independent, as torch's: the first goes on
    assert len(next(second)[0]) == 8 and len(next(first)[0]) == 8
    assert len(turbofeed_threads()) == 4
    del first, second
    assert wait_for_no_threads() == []


def test_load_state_dict_closes_the_running_iterators(shards):
    loader = turbofeed.DataLoader(shards, batch_size=8, num_workers=2, transform=T.imagenet_eval(32))
    first, second = iter(loader), iter(loader)
    next(first), next(second)
    loader.load_state_dict(loader.state_dict())
    with pytest.raises(RuntimeError, match="superseded"):
        next(first)
    assert wait_for_no_threads() == []  # both closed, though still referenced


def test_a_worker_exception_reaches_the_caller_and_stops_threads(tmp_path, odd_images, tar_writer):
    path = tar_writer(str(tmp_path / "bad.tar"), [(f"k{i}.jpg", odd_images["rgb"]) for i in range(30)]
                      + [("zz.jpg", b"")])
    loader = turbofeed.DataLoader(path, batch_size=4, num_workers=2, on_error="raise",
                                  transform=T.imagenet_eval(32))
    with pytest.raises(turbofeed.SampleError):
        for _ in loader:
            pass
    assert wait_for_no_threads() == []


def test_pipeline_stop_and_context_manager(shards):
    pipe = turbofeed.Pipeline(shards, num_workers=2)
    pipe.start()
    assert len(pipe.next_batch(3)) == 3
    pipe.stop()
    pipe.stop()  # idempotent
    assert wait_for_no_threads() == []
    with turbofeed.Pipeline(shards, num_workers=2) as pipe:
        pipe.next_batch(2)
    assert wait_for_no_threads() == []


def test_a_dropped_pipeline_releases_its_threads(shards):
    """A Pipeline dropped without stop() (its worker threads must not keep it alive)."""
    for _ in range(20):
        p = turbofeed.Pipeline(shards, num_workers=2)
        p.start()
        assert len(p.next_batch(4)) == 4
        del p
        assert wait_for_no_threads(timeout=2.0) == []


def test_a_dropped_pipeline_mid_epoch_with_a_transform(shards):
    pipes = [turbofeed.Pipeline(shards, num_workers=2, transform=T.imagenet_eval(32), shuffle=True)
             for _ in range(3)]
    for p in pipes:
        p.next_batch(40)
    assert len(turbofeed_threads()) == 6
    del pipes, p
    gc.collect()
    assert wait_for_no_threads(timeout=2.0) == []


def _script(shards: str, body: str) -> str:
    return textwrap.dedent(f"""
        import sys, time
        import turbofeed
        from turbofeed import transforms as T
        loader = turbofeed.DataLoader({shards!r}, batch_size=4, num_workers=2, prefetch=4,
                                      transform=T.imagenet_train(32))
    """) + textwrap.dedent(body)


def test_ctrl_c_ends_the_process_promptly(shards):
    code = _script(shards, """
        print("ready", flush=True)
        for epoch in range(1000):
            for x, y in loader:
                time.sleep(0.01)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in err
    assert proc.returncode != 0


def test_exit_with_a_live_iterator_does_not_hang(shards):
    code = _script(shards, """
        it = iter(loader)
        next(it)
        print("leaving with threads running", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "leaving" in done.stdout


def test_closing_an_idle_pool_wakes_its_threads_at_once(monkeypatch):
    """close() does not wait for idle threads to poll their stop flag: with the poll
    interval set to a minute, close still returns and every thread has exited."""
    from turbofeed.base import executor

    monkeypatch.setattr(executor, "_POLL_S", 60.0)
    ran = []
    pool = executor.Executor(3, "idle-test")
    pool.post(ran.append, "one task")
    deadline = time.monotonic() + 10
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    pool.close(timeout=30.0)
    assert ran == ["one task"]
    assert not pool.alive()
    assert time.monotonic() - started < 20.0  # a minute-long poll would have blocked the join


@pytest.mark.parametrize("workers", [4, 16])
def test_timeout_is_a_deadline_whatever_the_number_of_stuck_threads(shards, workers):
    """TimeoutError within timeout + 1 s: the stuck threads are abandoned, not joined one
    after the other (timeout=2 with 4 stuck threads took 42 s, issue 37 #6). The loader
    then runs again on fresh threads while the old ones are still stuck, and batches
    equal those of a loader that never stalled."""
    stuck, release = threading.Event(), threading.Event()

    def hang(image):
        if stuck.is_set():
            release.wait(60)
        return image

    def through(image):
        return image

    kw = dict(batch_size=8, num_workers=workers, shuffle=True, seed=1)
    loader = turbofeed.DataLoader(shards, transform=T.Compose([T.Resize(16), T.CenterCrop(16), hang]), timeout=1, **kw)
    want = list(turbofeed.DataLoader(shards, transform=T.Compose([T.Resize(16), T.CenterCrop(16), through]), **kw))
    stuck.set()
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"batch 0 of the pass took longer than timeout=1.0 s"):
            next(iter(loader))
        assert time.monotonic() - started < 2.0
        abandoned = turbofeed_threads()
        assert len(abandoned) >= min(workers, 16) // 2, abandoned  # still stuck in hang()
        stuck.clear()
        loader.set_epoch(0)
        got = []
        for images, labels in loader:  # fresh threads
            got.append((images, labels))
            release.set()  # the abandoned threads finish their sample now, into dropped batches
        assert len(got) == len(want) == 15
        assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, want))
    finally:
        release.set()
    assert wait_for_no_threads() == []  # each abandoned thread exits once its call returns
