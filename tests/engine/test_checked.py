"""engine.checked: which samples' JPEG scans were found intact, per dataset and generation,
starting from the dataset index's verdicts."""

from __future__ import annotations

import gc
import os
import threading

import pytest
from PIL import Image

from turbofeed.decode import native
from turbofeed.engine.checked import CheckedScans
from turbofeed.io import IndexedDataset

from builders import encode, small_jpeg, write_tar
from image_cases import cut_scan, ones_in_scan, textured

needs_native = pytest.mark.skipif(not native.built(), reason="the index checks scans with the native extension")


@pytest.fixture
def folders(tmp_path):
    """Two class folders of 4 JPEGs each: no dataset index, so no verdict to start from."""
    root = tmp_path / "images"
    for c in range(2):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(4):
            (root / f"c{c}" / f"{i}.jpg").write_bytes(small_jpeg(c * 10 + i))
    return str(root)


@pytest.fixture
def shards(tmp_path):
    paths = []
    for s in range(2):
        path = str(tmp_path / f"s{s}.tar")
        write_tar(path, [(f"{s}_{i}.jpg", small_jpeg(s * 10 + i)) for i in range(4)])
        paths.append(path)
    return paths


def test_marks_are_per_dataset_and_sample(folders):
    checked = CheckedScans()
    a, b = IndexedDataset(folders), IndexedDataset(folders)
    assert not checked.intact(a, 3)
    checked.mark(a, 3)
    assert checked.intact(a, 3)
    assert not checked.intact(a, 2) and not checked.intact(a, 4) and not checked.intact(b, 3)
    flags = checked.flags(a)
    assert flags.dtype == bool and len(flags) == len(a) == 8 and flags.sum() == 1


@needs_native
def test_samples_the_index_found_intact_start_checked(tmp_path):
    intact = encode(Image.fromarray(textured(seed=1)), quality=90)
    members = [("a.jpg", intact), ("b.jpg", cut_scan(intact, 0.85)), ("c.jpg", ones_in_scan(intact, 0.9)),
               ("d.png", encode(Image.fromarray(textured(seed=2)), "PNG")), ("e.jpg", small_jpeg(3))]
    path = write_tar(str(tmp_path / "mixed.tar"), members)
    for index in (False, None):  # built in memory; built, written and mapped
        assert CheckedScans().flags(IndexedDataset(path, index=index)).tolist() == [True, False, False, False, True]


@needs_native
def test_a_dataset_whose_sources_changed_starts_again_from_its_index(shards):
    checked = CheckedScans()
    data = IndexedDataset(shards, index=False)
    assert checked.flags(data).all()  # the index found every scan intact
    write_tar(shards[0] + ".new", [(f"n_{i}.jpg", small_jpeg(50 + i)) for i in range(4)])
    os.replace(shards[0] + ".new", shards[0])
    assert data.refresh() == [shards[0]]
    # the verdicts on the old bytes are gone: the re-indexed shard starts unchecked
    assert checked.flags(data).tolist() == [False] * 4 + [True] * 4
    del data
    gc.collect()
    assert len(checked._flags) == 0  # a dropped dataset's flags went with it


def test_threads_marking_at_once_never_lose_or_invent_a_mark(folders):
    checked, data = CheckedScans(), IndexedDataset([folders] * 256)
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
