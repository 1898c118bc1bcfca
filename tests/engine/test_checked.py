"""engine.checked: which samples' JPEG scans were found intact, per dataset and generation."""

from __future__ import annotations

import gc
import os
import threading

import pytest

from turbofeed.engine.checked import CheckedScans
from turbofeed.io import Dataset

from builders import small_jpeg, write_tar


@pytest.fixture
def shards(tmp_path):
    paths = []
    for s in range(2):
        path = str(tmp_path / f"s{s}.tar")
        write_tar(path, [(f"{s}_{i}.jpg", small_jpeg(s * 10 + i)) for i in range(4)])
        paths.append(path)
    return paths


def test_marks_are_per_dataset_and_sample(shards):
    checked = CheckedScans()
    a, b = Dataset(shards, index=False), Dataset(shards, index=False)
    assert not checked.intact(a, 3)
    checked.mark(a, 3)
    assert checked.intact(a, 3)
    assert not checked.intact(a, 2) and not checked.intact(a, 4) and not checked.intact(b, 3)
    flags = checked.flags(a)
    assert flags.dtype == bool and len(flags) == len(a) == 8 and flags.sum() == 1


def test_a_dataset_whose_sources_changed_starts_unchecked(shards):
    checked = CheckedScans()
    data = Dataset(shards, index=False)
    checked.mark(data, 1)
    write_tar(shards[0] + ".new", [(f"n_{i}.jpg", small_jpeg(50 + i)) for i in range(4)])
    os.replace(shards[0] + ".new", shards[0])
    assert data.refresh() == [shards[0]]
    assert not checked.intact(data, 1)  # the verdict was about the old bytes
    del data
    gc.collect()
    assert len(checked._flags) == 0  # a dropped dataset's flags went with it


def test_threads_marking_at_once_never_lose_or_invent_a_mark(shards):
    checked, data = CheckedScans(), Dataset(shards * 256, index=False)
    n = len(data)

    def mark(parity: int) -> None:
        for i in range(parity, n, 4):
            checked.mark(data, i)

    threads = [threading.Thread(target=mark, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [checked.intact(data, i) for i in range(n)] == [i % 4 < 2 for i in range(n)]
