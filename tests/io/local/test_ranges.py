"""io/local/ranges.py: where a chunk of samples lies on disk, as arrays; descriptors
kept at most max_open, never closed under a chunk that holds them."""

from __future__ import annotations

import os

import numpy as np
import pytest

from builders import small_jpeg, write_tar
from turbofeed.io import IndexedDataset
from turbofeed.io.local.ranges import SampleRanges


def shards(tmp_path, count: int, per: int = 3) -> list[str]:
    return [write_tar(str(tmp_path / f"s{k}.tar"), [(f"{k}_{i}.jpg", small_jpeg(k * 10 + i)) for i in range(per)])
            for k in range(count)]


def read_back(files, i: int) -> bytes:
    return os.pread(int(files.fds[i]), int(files.sizes[i]), int(files.offsets[i]))


def test_each_sample_is_its_image_bytes(tmp_path):
    data = IndexedDataset(shards(tmp_path, 4), index=False)
    ranges = SampleRanges(data.sources, data.starts, data.bad)
    gids = np.array([11, 0, 5, 7, 5], np.int64)
    assert len(ranges.files(gids).held) == 4  # the first chunk opens them
    files = ranges.files(gids)
    assert ranges.readable.all() and files.held == []  # 4 sources, all kept: nothing to hold
    for i, gid in enumerate(gids.tolist()):
        assert read_back(files, i) == data.read(gid)
        assert tuple(files.stamps[i]) == data.sources[int(files.source[i])].file.stamp


def test_files_past_max_open_are_let_go_but_never_under_a_holder(tmp_path):
    data = IndexedDataset(shards(tmp_path, 6), index=False)
    ranges = SampleRanges(data.sources, data.starts, data.bad, max_open=2)
    first = ranges.files(np.array([0, 3], np.int64))  # sources 0 and 1, held
    assert len(first.held) == 2
    later = ranges.files(np.array([6, 9, 12], np.int64))  # sources 2, 3, 4: the held ones are let go
    assert len(later.held) == 3
    for files, gids in ((first, [0, 3]), (later, [6, 9, 12])):
        for i, gid in enumerate(gids):
            assert read_back(files, i) == data.read(gid)  # still open: the chunk holds them
    assert (ranges._fds >= 0).sum() <= 3


def test_bad_samples_and_sources_without_ranges_are_not_readable(tmp_path):
    paths = shards(tmp_path, 2)
    write_tar(str(tmp_path / "s1.tar"), [("1_0.jpg", small_jpeg(1)), ("1_1.txt", b"no image")])
    data = IndexedDataset(paths, index=False)
    ranges = SampleRanges(data.sources, data.starts, data.bad)
    assert data.bad and not ranges.readable[list(data.bad)].any()
    assert ranges.readable[:3].all()


def open_shards(tmp_path) -> int:
    """Descriptors this process has open on the test's shards (the kernel's count)."""
    names = os.listdir("/proc/self/fd")
    targets = []
    for name in names:
        try:
            targets.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:  # the listing's own descriptor, gone
            pass
    return sum(t.startswith(str(tmp_path)) and t.endswith(".tar") for t in targets)


@pytest.mark.parametrize("max_open, kept", [(0, 1), (1, 1), (2, 2)])
def test_chunks_of_one_shard_keep_at_most_max_open_descriptors(tmp_path, max_open, kept):
    data = IndexedDataset(shards(tmp_path, 5), index=False)
    ranges = SampleRanges(data.sources, data.starts, data.bad, max_open=max_open)
    images = [data.read(3 * k + 1) for k in range(5)]  # the dataset's own descriptors: open before
    before = open_shards(tmp_path)
    for k in range(5):
        files = ranges.files(np.array([3 * k + 1], np.int64))
        assert read_back(files, 0) == images[k]
        del files  # the chunk's reads are done
        assert open_shards(tmp_path) - before == min(k + 1, kept)


def test_by_default_256_shards_all_stay_open(tmp_path):
    data = IndexedDataset(shards(tmp_path, 256, per=1), index=False)
    ranges = SampleRanges(data.sources, data.starts, data.bad)  # max_open's default: 256
    gids = np.arange(256, dtype=np.int64)
    assert len(ranges.files(gids).held) == 256  # the first chunk opens them all
    files = ranges.files(gids[::-1])
    assert files.held == []  # all kept open: nothing to hold
    assert read_back(files, 0) == data.read(255)
