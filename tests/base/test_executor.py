"""The one executor: named threads started on first use, ordered results, first error
wins, close cancels what waits and never hangs."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from turbofeed.base.executor import Executor, ExecutorClosed


def names() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("turbofeed-exec-test")}


def test_threads_start_at_the_first_call_and_are_named():
    pool = Executor(3, "exec-test")
    assert names() == set()
    assert pool.run_all(lambda x: x * x, range(8)) == [x * x for x in range(8)]
    assert names() == {f"turbofeed-exec-test-{i}" for i in range(3)}
    pool.close()
    assert names() == set()


def test_run_all_raises_the_earliest_error_after_the_running_items_end():
    pool = Executor(2, "exec-test")
    finished = []

    def work(i: int) -> int:
        if i in (3, 5):
            raise ValueError(f"item {i}")
        time.sleep(0.01)
        finished.append(i)
        return i

    with pytest.raises(ValueError, match="item 3"):
        pool.run_all(work, range(40))
    running_after = len(finished)
    time.sleep(0.1)
    assert len(finished) == running_after  # nothing still ran once run_all returned
    assert len(finished) < 38  # the items not started were cancelled
    pool.close()


def test_close_cancels_waiting_calls_and_refuses_new_ones():
    pool = Executor(1, "exec-test")
    gate, running = threading.Event(), threading.Event()

    def first_call() -> bool:
        running.set()
        return gate.wait(5)
    first = pool.submit(first_call)
    waiting = [pool.submit(time.sleep, 0) for _ in range(5)]
    assert running.wait(5)  # the thread has taken the first call: close() must let it finish
    threading.Timer(0.2, gate.set).start()
    pool.close()
    assert first.result() is True
    assert all(f.cancelled() for f in waiting)
    with pytest.raises(ExecutorClosed):
        pool.submit(time.sleep, 0)


def test_close_never_hangs_on_a_stuck_call(caplog):
    pool = Executor(1, "exec-test")
    stuck = threading.Event()
    pool.post(stuck.wait, 30)
    time.sleep(0.05)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        pool.close(timeout=0.3)
    assert time.monotonic() - started < 5
    assert "turbofeed-exec-test-0" in caplog.text
    stuck.set()


def test_an_error_in_posted_work_is_logged_not_lost(caplog):
    pool = Executor(1, "exec-test")

    def boom() -> None:
        raise RuntimeError("posted failure")

    with caplog.at_level(logging.ERROR, logger="turbofeed"):
        pool.post(boom)
        deadline = time.monotonic() + 5
        while "posted failure" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "posted failure" in caplog.text
    pool.close()


@pytest.mark.parametrize("how", ["submit", "post"])
def test_an_idle_thread_keeps_nothing_of_its_last_task_alive(how):
    """A thread waiting for its next task must not hold the last one's arguments (a DALI
    reader's pipeline, a pass's buffers): they are freed when the caller drops them."""
    import gc
    import weakref

    class Payload:
        pass

    pool = Executor(1, "exec-test")
    try:
        payload = Payload()
        alive = weakref.ref(payload)
        done = threading.Event()
        if how == "submit":
            pool.submit(lambda p: p, payload).result(timeout=10)
        else:
            pool.post(lambda p: done.set(), payload)
            assert done.wait(10)
        time.sleep(0.05)  # the thread is back in its wait
        del payload
        gc.collect()
        assert alive() is None
    finally:
        pool.close()
