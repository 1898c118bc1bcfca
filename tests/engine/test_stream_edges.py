"""engine.stream.BatchStream: where its batches are filled (worker threads, or the caller's
thread with ``num_workers=0``) and a stream that starts at its plan's end (a pass resumed
after its last batch): no batch, no thread (issue 37's mutation run of engine/stream.py)."""

from __future__ import annotations

import threading

from turbofeed.engine.policy import ErrorPolicy
from turbofeed.base.stageinfo import StageInfo
from turbofeed.engine.stats import Stats
from turbofeed.engine.stream import BatchStream
from turbofeed.plan import make_epoch_plan


class Stage:
    """Fills position ``j`` with the sample id and records the filling thread."""

    def __init__(self) -> None:
        self.info = StageInfo("decode.cpu", "sample")
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def acquire(self) -> list:
        return [None] * 4

    def fill(self, gid: int, buffer: list, j: int) -> None:
        buffer[j] = gid
        with self._lock:
            self.threads.add(threading.get_ident())


def batches(num_workers: int, start: int = 0) -> tuple[list[list[int]], Stage]:
    plan = make_epoch_plan(12, batch_size=4, seed=0, epoch=0, shuffle=False)
    stage = Stage()
    stream = BatchStream(plan, stage, ErrorPolicy("replace", Stats()), start=start, num_workers=num_workers)
    try:
        return [list(job.slot) for job in stream], stage
    finally:
        stream.close()


def test_workers_fill_on_their_threads_and_none_fill_on_the_callers():
    expected = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    out, stage = batches(num_workers=2)
    assert out == expected and threading.get_ident() not in stage.threads
    out, stage = batches(num_workers=0)
    assert out == expected and stage.threads == {threading.get_ident()}


def test_a_stream_starting_at_its_plans_end_yields_nothing_and_starts_no_thread():
    before = {t.name for t in threading.enumerate()}
    for workers in (0, 2):
        out, stage = batches(num_workers=workers, start=3)
        assert out == [] and stage.threads == set()
    assert {t.name for t in threading.enumerate()} == before


def test_a_bucketed_stream_starting_at_its_plans_end_yields_nothing_without_an_error():
    """Under "replace" a bucketed stream that delivered nothing says every batch was
    dropped (DatasetError): only when some batch was; one that starts at its plan's end
    dropped none and simply ends."""
    import numpy as np

    groups = np.array([0, 1] * 6)
    plan = make_epoch_plan(12, batch_size=4, seed=0, epoch=0, shuffle=False, buckets=groups)
    for workers in (0, 2):
        stream = BatchStream(plan, Stage(), ErrorPolicy("replace", Stats()), start=len(plan.order) // 4,
                             num_workers=workers)
        try:
            assert list(stream) == []
        finally:
            stream.close()
