"""io.dsindex: the dataset index is verified before it is believed (issue #25).

Each test builds the situation for real: shards swapped with ``rename`` on disk, a shard
rewritten in place with its size and times set back, bytes of the index file flipped, an
index with wrong counts, an index planted in a cache folder others can write or owned by
another user; and the loaders' ``index=`` argument.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import struct
import time

import numpy as np
import pytest
from builders import small_jpeg, write_tar

import turbofeed
from turbofeed.errors import DatasetError
from turbofeed.io import IndexedDataset
from turbofeed.io.dsindex import INDEX_NAME, build_index
from turbofeed.io.dsindex import fileformat
from turbofeed.io.dsindex.fileformat import read_index, write_index
from turbofeed.io.local import private

_IMAGE = small_jpeg(0)  # one image for every sample: shards with the same count have the same size
_STAMP = 1_700_000_000_000_000_000  # what `tar -x` leaves: every shard the same whole-second mtime


def _shard(path: str, prefix: str, label: int, n: int = 4) -> None:
    write_tar(path, [m for i in range(n) for m in [(f"{prefix}{i}.jpg", _IMAGE), (f"{prefix}{i}.cls", b"%d" % label)]])
    os.utime(path, ns=(_STAMP, _STAMP))


def _data(folder, shards: int = 3) -> str:
    """Shards ``s-K.tar`` of equal size and mtime, keys ``<letter>i``, label ``K + 1``."""
    os.makedirs(folder, exist_ok=True)
    for k in range(shards):
        _shard(os.path.join(folder, f"s-{k}.tar"), "abcdefgh"[k], k + 1)
    return str(folder)


def _truth(ds: IndexedDataset) -> list[tuple[str, int]]:
    return [(ds.describe(g)[1], int(ds.labels[g])) for g in range(len(ds))]


def _expected(*shards: tuple[str, int], n: int = 4) -> list[tuple[str, int]]:
    return [(f"{prefix}{i}", label) for prefix, label in shards for i in range(n)]


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_shards_swapped_by_mv_are_read_again_into_a_new_index(tmp_path, caplog):
    data = _data(tmp_path / "data")
    build_index(data, progress=False)
    a, b = os.path.join(data, "s-0.tar"), os.path.join(data, "s-1.tar")
    assert os.path.getsize(a) == os.path.getsize(b) and os.stat(a).st_mtime_ns == os.stat(b).st_mtime_ns
    os.rename(a, a + ".tmp")  # mv s-0.tar tmp; mv s-1.tar s-0.tar; mv tmp s-1.tar
    os.rename(b, a)
    os.rename(a + ".tmp", b)
    old = os.stat(os.path.join(data, INDEX_NAME)).st_ino
    with caplog.at_level(logging.INFO, logger="turbofeed"):
        ds = IndexedDataset(data)
    assert _truth(ds) == _expected(("b", 2), ("a", 1), ("c", 3))
    assert ds.read(0) == _IMAGE and not _warnings(caplog)
    assert "3 shards (2 read, 1 unchanged)" in caplog.text  # the third is copied from the old index
    assert ds.index.path == os.path.join(data, INDEX_NAME) and os.stat(ds.index.path).st_ino != old
    assert _truth(IndexedDataset(data)) == _truth(ds) and IndexedDataset(data).index.stale(ds._located) == []


def test_a_shard_rewritten_with_the_same_size_and_mtime_is_detected(tmp_path):
    data = _data(tmp_path / "data")
    build_index(data, progress=False)
    path = os.path.join(data, "s-1.tar")
    before = os.stat(path)
    time.sleep(0.05)  # past the kernel's coarse timestamp tick, so the rewrite's ctime is later
    _shard(path + ".new", "x", 7)
    with open(path + ".new", "rb") as f, open(path, "r+b") as g:  # in place: same inode
        g.write(f.read())
    os.remove(path + ".new")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert _truth(IndexedDataset(data)) == _expected(("a", 1), ("x", 7), ("c", 3))


def test_a_folder_renamed_with_its_index_keeps_using_it(tmp_path, caplog):
    data = _data(tmp_path / "data")
    build_index(data, progress=False)
    moved = str(tmp_path / "moved")
    os.rename(data, moved)  # mv: same inodes and times
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(moved)
    assert ds.index.path == os.path.join(moved, INDEX_NAME) and not _warnings(caplog)
    assert _truth(ds) == _expected(("a", 1), ("b", 2), ("c", 3))


def _flip(path: str, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x04]))


def _loader_labels(data: str, index: str | None = None) -> list[int]:
    loader = turbofeed.DataLoader(turbofeed.Dataset(data, index=index), batch_size=4, num_workers=1,
                                  return_keys=True)
    try:
        return [int(y) for _, labels, _ in loader for y in labels]
    finally:
        loader.close()


@pytest.mark.parametrize("where", ["label", "header"])
def test_a_flipped_byte_in_the_index_is_refused_with_one_warning(tmp_path, caplog, where):
    data = _data(tmp_path / "data")
    index = build_index(data, progress=False).path
    header, _ = read_index(index)
    if where == "label":  # one label of shard 1: 2 -> 6
        array = header["arrays"]["label_value"]
        _flip(index, array["offset"] + 4 * np.dtype(array["dtype"]).itemsize)
    else:  # a digit of a count in the JSON header: still valid JSON
        text = open(index, "rb").read()
        _flip(index, text.rindex(b'"samples":4') + len('"samples":'))
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(data)
    assert ds.index.path == index and _truth(ds) == _expected(("a", 1), ("b", 2), ("c", 3))  # rebuilt
    warned = _warnings(caplog)
    assert len(warned) == 1 and index in warned[0] and "checksum mismatch" in warned[0], warned
    assert "building it again" in warned[0] and "turbofeed index" not in warned[0]  # no step to take
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        assert _loader_labels(data) == [1] * 4 + [2] * 4 + [3] * 4
    assert not _warnings(caplog)


@pytest.mark.parametrize("count", [5, 400])
def test_a_wrong_count_with_a_valid_checksum_is_refused(tmp_path, caplog, count):
    data = _data(tmp_path / "data")
    index = build_index(data, progress=False).path
    header, arrays = read_index(index)
    header["shards"][0]["samples"] = count  # a writer's mistake: the checksum covers it as written
    write_index(index, header, {name: np.array(a) for name, a in arrays.items()})
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(data)
    assert ds.index.path == index and _truth(ds) == _expected(("a", 1), ("b", 2), ("c", 3))  # rebuilt
    warned = _warnings(caplog)
    assert len(warned) == 1 and index in warned[0] and "damaged dataset index" in warned[0], warned
    assert _loader_labels(data) == [1] * 4 + [2] * 4 + [3] * 4
    assert read_index(index)[0]["shards"][0]["samples"] == 4


def test_an_index_cut_short_or_of_an_older_version_is_refused(tmp_path, caplog, monkeypatch):
    data = _data(tmp_path / "data")
    index = build_index(data, progress=False).path
    header, arrays = read_index(index)
    kept = {name: np.array(a) for name, a in arrays.items()}
    with open(index, "r+b") as f:
        f.truncate(os.path.getsize(index) - 1)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        assert IndexedDataset(data).index.path == index  # refused, built again
    assert "cut short" in caplog.text and index in caplog.text and len(_warnings(caplog)) == 1
    # Version 1 files cannot be written any more: the writer, told it is version 1,
    # writes one with the version number such files carry.
    monkeypatch.setattr(fileformat, "VERSION", 1)
    write_index(index, header, kept)
    monkeypatch.undo()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(data)
    assert ds.index.path == index and len(ds) == 12
    assert "format version 1" in caplog.text and "building it again" in caplog.text
    assert read_index(index)[0]["version"] == fileformat.VERSION


def _planted(tmp_path, cache: str) -> str:
    """Shards indexed into ``cache`` (a pattern goes to the index cache), then that index
    rewritten with a valid checksum, the shards' true identities and every label 9: an
    index that would relabel the data if it were believed."""
    data = _data(tmp_path / "data")
    pattern = os.path.join(data, "s-{0..2}.tar")
    index = build_index(pattern, cache_dir=cache, progress=False).path
    assert index.startswith(cache)
    header, arrays = read_index(index)
    planted = {name: np.array(a) for name, a in arrays.items()}
    planted["label_value"][:] = 9
    write_index(index, header, planted)
    return pattern


def test_a_planted_index_in_a_cache_others_can_write_is_not_used(tmp_path, caplog):
    cache = tmp_path / "shared"
    cache.mkdir()
    pattern = _planted(tmp_path, str(cache))
    assert _truth(IndexedDataset(pattern, cache_dir=str(cache)))[0] == ("a0", 9)  # believed: the cache is private
    cache.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(pattern, cache_dir=str(cache))
    # not used, and not overwritten either: an index written there would not be believed
    assert ds.index.path == "(built in memory)" and _truth(ds) == _expected(("a", 1), ("b", 2), ("c", 3))
    warned = _warnings(caplog)
    assert len(warned) == 1 and "not using" in warned[0], warned
    assert f"{cache} is writable by others (mode 0777, no sticky bit)" in warned[0]
    cache.chmod(0o1777)  # sticky, as /tmp: others cannot replace the folder below, which is ours
    assert IndexedDataset(pattern, cache_dir=str(cache)).index is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root (chown)")
def test_an_index_owned_by_another_user_is_not_used(tmp_path, caplog):
    cache = str(tmp_path / "cache")
    pattern = _planted(tmp_path, cache)
    index = IndexedDataset(pattern, cache_dir=cache).index.path
    os.chown(index, 12345, 12345)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(pattern, cache_dir=cache)
    assert _truth(ds) == _expected(("a", 1), ("b", 2), ("c", 3))
    assert f"{index} is owned by uid 12345, not by you (uid 0)" in caplog.text
    assert ds.index.path == index and os.stat(index).st_uid == 0  # replaced by one of the user's


def test_index_false_writes_nothing(tmp_path):
    data = _data(tmp_path / "data")
    cache = tmp_path / "cache"
    ds = IndexedDataset(data, cache_dir=str(cache), index=False)
    assert not os.path.exists(ds.index.path) and _truth(ds) == _expected(("a", 1), ("b", 2), ("c", 3))
    assert not cache.exists() and sorted(os.listdir(data)) == ["s-0.tar", "s-1.tar", "s-2.tar"]


def test_the_cache_folders_turbofeed_creates_are_private(tmp_path):
    data = _data(tmp_path / "data")
    cache = tmp_path / "new" / "cache"
    assert IndexedDataset(os.path.join(data, "s-{0..1}.tar"), cache_dir=str(cache)).index.path.startswith(str(cache))
    for folder in (tmp_path / "new", cache, cache / "dataset-index"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder


def test_distrust_reasons(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir(mode=0o700)
    path = folder / "x"
    path.write_bytes(b"1")
    path.chmod(0o644)
    assert private.distrust(str(path)) is None and private.distrust(str(folder / "absent")) is None
    path.chmod(0o666)
    assert private.distrust(str(path)) == f"{path} is writable by others (mode 0666)"
    path.chmod(0o644)
    os.symlink(path, folder / "link")
    assert "not a regular file" in private.distrust(str(folder / "link"))
    folder.chmod(0o770)
    assert private.distrust(str(path)) == f"{folder} is writable by others (mode 0770, no sticky bit)"


@pytest.mark.parametrize("front", ["DataLoader", "Pipeline"])
def test_the_loaders_take_an_explicit_index(tmp_path, front):
    data = _data(tmp_path / "data")
    out = str(tmp_path / "elsewhere" / "my.index")
    assert build_index(data, out=out, progress=False).path == out
    if front == "DataLoader":
        assert not os.path.exists(IndexedDataset(data, index=False).index.path)  # built in memory, out not used
        assert _loader_labels(data, index=out) == [1] * 4 + [2] * 4 + [3] * 4
        loader = turbofeed.DataLoader(turbofeed.Dataset(data, index=out), batch_size=4, num_workers=1)
        assert loader.dataset.index.path == out
        loader.close()
    else:
        pipe = turbofeed.Pipeline(turbofeed.Dataset(data, index=out), num_workers=1)
        assert pipe.dataset.index.path == out
        pipe.start()
        got = [(s.key, s.label) for s in pipe.next_batch(12)]
        pipe.stop()
        assert got == _expected(("a", 1), ("b", 2), ("c", 3))
        assert not os.path.exists(turbofeed.Pipeline(turbofeed.Dataset(data, index=False),
                                                     num_workers=1).dataset.index.path)


def test_an_explicit_index_that_is_damaged_is_refused_with_a_warning(tmp_path, caplog):
    data = _data(tmp_path / "data")
    out = str(tmp_path / "elsewhere" / "my.index")
    build_index(data, out=out, progress=False)
    _flip(out, os.path.getsize(out) - 2)  # inside the header's closing bytes
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        assert _loader_labels(data, index=out) == [1] * 4 + [2] * 4 + [3] * 4
    assert f"{out}: damaged dataset index (checksum mismatch)" in caplog.text
    with pytest.raises(turbofeed.DatasetError, match="no dataset index at"):
        turbofeed.DataLoader(turbofeed.Dataset(data, index=str(tmp_path / "missing.index")), batch_size=4,
                             num_workers=1)


def test_a_write_that_fails_leaves_neither_the_index_nor_its_temporary_file(tmp_path):
    # the header cannot be written (not JSON) after the arrays were: nothing of it stays
    # behind, and an index already there is kept as it was
    path = str(tmp_path / INDEX_NAME)
    write_index(path, {"shards": []}, {"a": np.arange(3)})
    before = open(path, "rb").read()
    with pytest.raises(TypeError):
        write_index(path, {"shards": [], "bad": object()}, {"a": np.arange(1000)})
    assert os.listdir(tmp_path) == [INDEX_NAME] and open(path, "rb").read() == before


def test_an_array_the_header_places_past_the_arrays_is_refused(tmp_path):
    # a writer's mistake under a valid checksum: array "a" holds 3 uint32 (12 bytes), the
    # header says 20 (80 bytes, running into the header itself): refused, never read as ids
    path = str(tmp_path / INDEX_NAME)
    write_index(path, {"shards": []}, {"a": np.arange(3, dtype=np.uint32)})
    with open(path, "rb") as f:
        data = f.read()
    magic, at, length, _ = struct.unpack("<8sQQI", data[:28])
    header = json.loads(data[at:at + length])
    header["arrays"]["a"]["count"] = 20
    text = json.dumps(header).encode()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(text)
        f.truncate(at + len(text))
        crc = fileformat.checksum(f.fileno(), at + len(text), at, len(text))
        f.seek(0)
        f.write(struct.pack("<8sQQI", magic, at, len(text), crc))
    with pytest.raises(DatasetError, match="array a lies outside the arrays"):
        read_index(path)


@pytest.mark.parametrize("changed", [3, 4])
def test_the_warning_names_three_changed_shards_and_counts_the_rest(tmp_path, caplog, changed):
    # an index named by index= is used as it is (the loader builds none); the changed
    # shards are indexed one by one
    data = _data(tmp_path / "data", shards=4)
    out = build_index(data, out=str(tmp_path / "named.index"), progress=False).path
    for k in range(changed):  # each rewritten with a label of 7 since the index was built
        _shard(os.path.join(data, f"s-{k}.tar"), "abcdefgh"[k], 7)
        os.utime(os.path.join(data, f"s-{k}.tar"), ns=(_STAMP + 10**9, _STAMP + 10**9))
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(data, index=out)
    assert [label for _, label in _truth(ds)] == [7] * 4 * changed + [4] * 4 * (4 - changed)
    warned = _warnings(caplog)
    assert len(warned) == 1 and f"{changed} shard(s) changed" in warned[0], warned
    assert "(s-0.tar, s-1.tar, s-2.tar" in warned[0]
    assert ("and 1 more)" in warned[0]) == (changed == 4) and " more" not in warned[0].replace("and 1 more", "")


def test_keys_that_run_past_their_bytes_are_refused(tmp_path, caplog):
    # the key bytes one short under a valid checksum: the last key would be read cut
    data = _data(tmp_path / "data")
    index = build_index(data, progress=False).path
    header, arrays = read_index(index)
    kept = {name: np.array(a) for name, a in arrays.items()}
    kept["key_blob"] = kept["key_blob"][:-1]
    write_index(index, header, kept)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(data)
    assert ds.index.path == index and _truth(ds) == _expected(("a", 1), ("b", 2), ("c", 3))
    warned = _warnings(caplog)
    assert len(warned) == 1 and "the keys run past their bytes" in warned[0], warned
