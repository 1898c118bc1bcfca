"""io.dsindex.auto.memory_index: ``index=False`` builds the dataset index in memory, by the
same reads as the automatic index, and writes nothing (issue #25).

Real shards on disk; the data folder and the cache folders are compared byte for byte
before and after; each shard's opens are counted in a real child process (an audit hook
on ``open``); an index planted next to the data with other labels (a valid file, its
checksum recomputed) shows that ``index=False`` looks for none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap

import pytest
from builders import small_jpeg, write_tar

import turbofeed
from turbofeed.errors import DatasetError
from turbofeed.io import IndexedDataset
from turbofeed.io.columns import StrColumn
from turbofeed.io.dsindex import INDEX_NAME, DatasetIndex, build_index
from turbofeed.io.dsindex.fileformat import read_index, write_index

_IMAGE = small_jpeg(0)


def _data(folder, shards: int = 3, n: int = 4) -> str:
    """Shards ``s-K.tar``, keys ``<letter>i``, label ``K + 1``."""
    os.makedirs(folder, exist_ok=True)
    for k in range(shards):
        write_tar(os.path.join(folder, f"s-{k}.tar"),
                  [m for i in range(n) for m in [(f"{'abcdefgh'[k]}{i}.jpg", _IMAGE), (f"{'abcdefgh'[k]}{i}.cls",
                                                                                         b"%d" % (k + 1))]])
    return str(folder)


def _snapshot(*folders) -> dict:
    """Every file under ``folders`` (and the folders themselves): bytes, mode, mtime_ns."""
    out = {}
    for folder in folders:
        folder = str(folder)
        if not os.path.exists(folder):
            out[folder] = None
            continue
        for root, dirs, files in os.walk(folder):
            out[root] = sorted(dirs + files)
            for name in files:
                path = os.path.join(root, name)
                st = os.stat(path)
                with open(path, "rb") as f:
                    out[path] = (f.read(), st.st_mode, st.st_mtime_ns)
    return out


def _truth(ds: IndexedDataset) -> list[tuple[str, str, int]]:
    return [(*ds.describe(g), int(ds.labels[g])) for g in range(len(ds))]


def _in_memory(ds: IndexedDataset) -> None:
    """Every plain tar source of ``ds`` comes from a dataset index that is no file."""
    assert isinstance(ds.index, DatasetIndex) and not os.path.exists(ds.index.path)
    # the index's columns, not per-shard rows
    assert all(isinstance(s.table.keys, StrColumn) for s in ds.sources if s.path.endswith(".tar"))


def test_index_false_builds_in_memory_and_writes_nothing(tmp_path):
    data = _data(tmp_path / "data")
    cache = tmp_path / "cache"
    default_cache = os.environ["TURBOFEED_CACHE_DIR"]
    before = _snapshot(data, cache, default_cache)
    ds = IndexedDataset(data, cache_dir=str(cache), index=False)
    _in_memory(ds)
    assert _snapshot(data, cache, default_cache) == before and not cache.exists()
    assert [(key, label) for _, key, label in _truth(ds)] == \
        [(f"{p}{i}", k + 1) for k, p in enumerate("abc") for i in range(4)]
    written = IndexedDataset(data, cache_dir=str(cache))  # the automatic index, written next to the data
    assert written.index.path == os.path.join(data, INDEX_NAME)
    assert _truth(written) == _truth(ds) and written.class_names == ds.class_names
    for g in range(len(ds)):
        assert ds.read(g) == written.read(g) and ds.member_exts(g) == written.member_exts(g)


CHILD = textwrap.dedent("""
    import json, os, sys
    opened = []
    sys.addaudithook(lambda event, args: opened.append(args[0]) if event == "open" and
                     isinstance(args[0], str) and args[0].endswith(".tar") else None)
    from turbofeed.io import IndexedDataset
    ds = IndexedDataset(sys.argv[1], cache_dir=sys.argv[2], index=False)
    print(json.dumps({"opened": sorted(opened), "samples": len(ds), "in_memory": ds.index is not None}))
""")


def test_index_false_reads_each_shard_once(tmp_path):
    data = _data(tmp_path / "data", shards=4)
    out = subprocess.run([sys.executable, "-c", CHILD, data, str(tmp_path / "cache")], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    said = json.loads(out.stdout.strip().splitlines()[-1])
    assert said == {"opened": [os.path.join(data, f"s-{k}.tar") for k in range(4)], "samples": 16, "in_memory": True}
    assert not (tmp_path / "cache").exists()


def test_an_index_planted_next_to_the_data_is_not_used(tmp_path):
    data = _data(tmp_path / "data")
    planted = build_index(data, progress=False).path
    header, arrays = read_index(planted)
    arrays = dict(arrays)
    arrays["label_value"] = arrays["label_value"] + 10  # other labels, a valid file (its checksum written anew)
    write_index(planted, header, arrays)
    assert sorted(set(IndexedDataset(data).labels.tolist())) == [11, 12, 13]  # believed when looked for
    before = _snapshot(data)
    ds = IndexedDataset(data, index=False)
    _in_memory(ds)
    assert sorted(set(ds.labels.tolist())) == [1, 2, 3] and _snapshot(data) == before


@pytest.mark.parametrize("front", ["DataLoader", "Pipeline"])
def test_both_front_ends_index_in_memory(tmp_path, front):
    data = _data(tmp_path / "data")
    cache = tmp_path / "cache"
    before = _snapshot(data)
    if front == "DataLoader":
        loader = turbofeed.DataLoader(turbofeed.Dataset(data, cache_dir=str(cache), index=False), batch_size=4,
                                      num_workers=1)
        _in_memory(loader.dataset)
        labels = sorted(int(y) for _, ys in loader for y in ys)
        loader.close()
    else:
        pipe = turbofeed.Pipeline(turbofeed.Dataset(data, cache_dir=str(cache), index=False), num_workers=1)
        _in_memory(pipe.dataset)
        pipe.start()
        labels = sorted(s.label for s in pipe.next_batch(12))
        pipe.stop()
    assert labels == [1] * 4 + [2] * 4 + [3] * 4
    assert _snapshot(data) == before and not cache.exists()


def _damaged(folder) -> str:
    """Shards: good, cut inside a member, a corrupt header block, and a gzipped one (always
    indexed on its own)."""
    data = _data(folder, shards=3)
    with tarfile.open(os.path.join(data, "s-1.tar")) as t:
        cut = t.getmembers()[4].offset_data + 10  # inside the third sample's image
    with open(os.path.join(data, "s-1.tar"), "r+b") as f:
        f.truncate(cut)
    with tarfile.open(os.path.join(data, "s-2.tar")) as t:
        header = t.getmembers()[2].offset  # the second sample's first header
    with open(os.path.join(data, "s-2.tar"), "r+b") as f:
        f.seek(header + 148)  # its checksum field
        f.write(b"garbage!")
    import gzip  # noqa: PLC0415: only here
    with open(os.path.join(data, "s-0.tar"), "rb") as src, gzip.open(os.path.join(data, "s-3.tar.gz"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    return data


def test_damaged_shards_are_reported_as_with_the_automatic_index(tmp_path):
    data = _damaged(tmp_path / "data")
    auto_data = str(tmp_path / "auto")
    shutil.copytree(data, auto_data)
    mem = IndexedDataset(data, cache_dir=str(tmp_path / "c1"), index=False)
    auto = IndexedDataset(auto_data, cache_dir=str(tmp_path / "c2"))
    assert auto.index.path == os.path.join(auto_data, INDEX_NAME)
    _in_memory(mem)
    rel = lambda paths: [os.path.basename(p) for p in paths]  # noqa: E731
    assert rel(mem.damaged) == rel(auto.damaged) and len(mem.damaged) == 2
    assert [(k, lab) for _, k, lab in _truth(mem)] == [(k, lab) for _, k, lab in _truth(auto)]
    assert len(mem) == len(auto) and "s-3.tar.gz" in {os.path.basename(s.path) for s in mem.sources}
    errors = []
    for where, index in ((data, False), (auto_data, None)):
        with pytest.raises(DatasetError) as info:
            IndexedDataset(where, on_damage="raise", index=index)
        errors.append(str(info.value).replace(auto_data, data))
    assert errors[0] == errors[1] and "s-1.tar" in errors[0], errors
    for where, index in ((data, False), (auto_data, None)):
        with pytest.raises(DatasetError, match="s-1.tar"):
            turbofeed.DataLoader(turbofeed.Dataset(where, index=index), batch_size=4, num_workers=1, on_error="raise")


def test_a_loader_over_damaged_shards_skips_as_with_the_automatic_index(tmp_path):
    data = _damaged(tmp_path / "data")
    auto_data = str(tmp_path / "auto")
    shutil.copytree(data, auto_data)
    got = []
    for where, index in ((data, False), (auto_data, None)):
        loader = turbofeed.DataLoader(turbofeed.Dataset(where, index=index), batch_size=2, num_workers=1,
                                      on_error="skip", return_keys=True)
        got.append((sorted((k, int(y)) for _, ys, ks in loader for k, y in zip(ks, ys)),
                    sorted(os.path.basename(p) for p in loader.stats.damaged_shards)))
        loader.close()
    assert got[0] == got[1] and got[0][1] == ["s-1.tar", "s-2.tar"]
    assert len(got[0][0]) == 10  # 4, 2 before the cut, none before the bad header, 4 in the gzipped copy
