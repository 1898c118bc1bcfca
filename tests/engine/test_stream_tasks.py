"""engine.stream: a per-sample stage that declares ``per_task`` > 1 (the GPU stage: a few
tens of microseconds of Python per sample) has its positions filled several to a worker
task, with the same batches, the same replacements and the same first error as one
position per task. Real plans, real threads; ``fill`` is the stage contract written out."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from turbofeed.engine.policy import ErrorPolicy
from turbofeed.base.stageinfo import StageInfo
from turbofeed.engine.stats import Stats
from turbofeed.engine.stream import BatchStream
from turbofeed.errors import SampleError
from turbofeed.plan import make_epoch_plan

BATCH = 16


class Buffer(list):
    """A batch's positions, numbered in the order the batches were acquired."""

    def __init__(self, n: int) -> None:
        super().__init__([None] * BATCH)
        self.n = n


class Stage:
    """Fills position ``j`` with the sample id; the ``bad`` ids raise SampleError. Records
    which thread filled each position of each batch."""

    def __init__(self, per_task: int, bad: set[int]) -> None:
        self.info = StageInfo("decode.gpu", "sample+batch", per_task=per_task)
        self.bad = bad
        self.threads: dict[tuple[int, int], int] = {}
        self.acquired = 0
        self._lock = threading.Lock()

    def acquire(self) -> Buffer:
        self.acquired += 1
        return Buffer(self.acquired)

    def fill(self, gid: int, buffer: Buffer, j: int) -> None:
        if gid in self.bad:
            raise SampleError("s.tar", f"k{gid}", "decode.gpu", "damaged JPEG")
        buffer[j] = gid
        with self._lock:
            self.threads[(buffer.n, j)] = threading.get_ident()


def run(per_task: int, mode: str, bad: set[int]) -> tuple[list, Stage]:
    plan = make_epoch_plan(75, batch_size=BATCH, seed=3, epoch=1, shuffle=True)
    stage = Stage(per_task, bad)
    stream = BatchStream(plan, stage, ErrorPolicy(mode, Stats()), num_workers=4, prefetch=2)
    out = []
    try:
        for job in stream:
            out.append((list(job.slot), job.ids.tolist(), job.ok.tolist()))
    finally:
        stream.close()
    return out, stage


@pytest.mark.parametrize("mode", ["replace", "skip"])
def test_several_positions_per_task_fill_the_same_batches(mode):
    bad = {4, 5, 6, 40, 41, 70}
    one, _ = run(1, mode, bad)
    for per_task in (3, 8):
        several, stage = run(per_task, mode, bad)
        assert several == one
        assert len(one) == 5  # 75 samples in batches of 16, the last one short
        # each task's positions ran on one thread (a slot of 16: tasks 0-7 and 8-15 for 8)
        by_slot: dict[int, dict[int, int]] = {}
        for (slot, j), thread in stage.threads.items():
            by_slot.setdefault(slot, {})[j] = thread
        for threads in by_slot.values():
            for j, thread in threads.items():
                first = j - j % per_task
                assert threads.get(first, thread) == thread


def test_the_first_bad_position_raises_whatever_the_task_size():
    plan = make_epoch_plan(75, batch_size=BATCH, seed=3, epoch=1, shuffle=True)
    order = np.asarray(plan.order)
    bad = {int(order[9]), int(order[2])}  # positions 2 and 9 of the first batch
    messages = []
    for per_task in (1, 8):
        with pytest.raises(SampleError) as err:
            run(per_task, "raise", bad)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and f"k{int(order[2])}" in messages[0]
