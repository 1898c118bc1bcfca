"""io.dsindex.auto: the first loader builds the dataset index, later ones map it; one
build per node under a file lock; a build killed mid-way leaves nothing believed (issue #25).

Real child processes: each counts the shard files it opens (an audit hook on ``open``,
so "reads no shard header" is counted, not timed), says whether it built the index, and
prints what the dataset holds. Processes killed with SIGKILL are killed for real, at the
rename that would publish the index or while shards are being read.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import sys
import textwrap
import time

import pytest
from builders import small_jpeg, write_tar

from turbofeed.io import IndexedDataset
from turbofeed.io.dsindex import INDEX_NAME
from turbofeed.io.dsindex.lock import WAIT_ENV, lock_path

_IMAGE = small_jpeg(0)

CHILD = textwrap.dedent("""
    import json, logging, os, signal, sys, time
    opened, kill_at = [], os.environ.get("KILL_AT", "")

    def hook(event, args):
        if event == "open" and isinstance(args[0], str) and args[0].endswith(".tar"):
            opened.append(args[0])
            if kill_at == "third shard" and len(opened) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
        publishing = event == "os.rename" and os.path.basename(str(args[0])).startswith(".turbofeed.index-")
        if publishing and kill_at == "publish":  # the temporary file complete, not renamed yet
            os.kill(os.getpid(), signal.SIGKILL)
    sys.addaudithook(hook)
    from turbofeed.io import IndexedDataset
    said, warned = [], []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())
            if record.levelno >= logging.WARNING:
                warned.append(record.getMessage())
    log = logging.getLogger("turbofeed")
    log.addHandler(Keep())
    log.setLevel(logging.INFO)
    go = os.environ.get("GO_FILE")
    while go and not os.path.exists(go):  # every child starts its IndexedDataset at once
        time.sleep(0.005)
    ds = IndexedDataset(sys.argv[1])
    built = [m for m in said if "turbofeed: dataset index" in m and "0 read" not in m]
    print(json.dumps({"opened": len(opened), "built": len(built), "waited": sum("waiting" in m for m in said),
                      "index": ds.index.path, "keys": [ds.describe(g)[1] for g in range(len(ds))],
                      "labels": ds.labels.tolist(), "warnings": warned}))
""")


def _data(folder, shards: int = 4, n: int = 5) -> str:
    """Shards ``s-KK.tar`` of ``n`` samples, keys ``kK-i``, label ``K``."""
    os.makedirs(folder, exist_ok=True)
    for k in range(shards):
        write_tar(os.path.join(folder, f"s-{k:02d}.tar"),
                  [m for i in range(n) for m in [(f"k{k}-{i}.jpg", _IMAGE), (f"k{k}-{i}.cls", b"%d" % k)]])
    return str(folder)


def _expected(shards: int = 4, n: int = 5) -> tuple[list[str], list[int]]:
    return [f"k{k}-{i}" for k in range(shards) for i in range(n)], [k for k in range(shards) for _ in range(n)]


def _spawn(data: str, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, data], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})


def _run(data: str, **env) -> dict:
    proc = _spawn(data, **env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def test_the_first_loader_builds_the_index_and_the_next_reads_no_shard(tmp_path):
    data = _data(tmp_path / "data")
    first = _run(data)
    assert first["built"] == 1 and first["opened"] == 4 and first["index"] == os.path.join(data, INDEX_NAME)
    assert (first["keys"], first["labels"]) == _expected() and not first["warnings"]
    second = _run(data)
    assert second["built"] == 0 and second["opened"] == 0  # one stat per shard, no header read
    assert (second["keys"], second["labels"]) == _expected()


def test_a_changed_shard_is_the_only_one_read_again(tmp_path):
    data = _data(tmp_path / "data")
    _run(data)
    path = os.path.join(data, "s-02.tar")
    write_tar(path, [m for i in range(7) for m in [(f"new-{i}.jpg", _IMAGE), (f"new-{i}.cls", b"9")]])
    again = _run(data)
    assert again["built"] == 1 and again["opened"] == 1 and again["labels"] == [0] * 5 + [1] * 5 + [9] * 7 + [3] * 5
    assert _run(data)["opened"] == 0


def test_eight_processes_starting_together_build_once(tmp_path):
    data = _data(tmp_path / "data", shards=24, n=40)
    go = str(tmp_path / "go")
    procs = [_spawn(data, GO_FILE=go) for _ in range(8)]
    time.sleep(3)  # imported, waiting at the starting line (a late one only finds the index ready)
    open(go, "w").close()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert sum(r["built"] for r in results) == 1, [(r["built"], r["opened"], r["waited"]) for r in results]
    builder = next(r for r in results if r["built"])
    assert builder["opened"] == 24 and all(r["opened"] == 0 for r in results if r is not builder)
    keys, labels = _expected(24, 40)
    assert all((r["keys"], r["labels"], r["index"]) == (keys, labels, builder["index"]) for r in results)
    assert not any(r["warnings"] for r in results)
    assert [n for n in os.listdir(data) if n.endswith(".tmp")] == []


@pytest.mark.parametrize("kill_at", ["publish", "third shard"])
def test_a_build_killed_midway_leaves_nothing_believed(tmp_path, caplog, kill_at):
    data = _data(tmp_path / "data")
    proc = _spawn(data, KILL_AT=kill_at)
    proc.communicate(timeout=120)
    assert proc.returncode == -9  # SIGKILL: no handler, no cleanup ran
    left = sorted(os.listdir(data))
    assert INDEX_NAME not in left and os.path.basename(lock_path(os.path.join(data, INDEX_NAME))) in left
    temps = [n for n in left if n.endswith(".tmp")]
    assert len(temps) == (1 if kill_at == "publish" else 0)  # a whole file, never under the index's name
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="turbofeed"):
        ds = IndexedDataset(data)
    assert time.monotonic() - started < 10 and "waiting" not in caplog.text  # the dead builder's lock went
    assert ([ds.describe(g)[1] for g in range(len(ds))], ds.labels.tolist()) == _expected()
    assert ds.index.path == os.path.join(data, INDEX_NAME) and not [n for n in os.listdir(data) if n.endswith(".tmp")]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


HOLD = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(60)
""")


def test_a_wait_that_runs_out_builds_in_memory_and_writes_nothing(tmp_path, caplog, monkeypatch):
    data = _data(tmp_path / "data")
    lock = lock_path(os.path.join(data, INDEX_NAME))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, lock], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(BlockingIOError):  # really held by the other process
            fd = os.open(lock, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
        monkeypatch.setenv(WAIT_ENV, "0.5")
        with caplog.at_level(logging.INFO, logger="turbofeed"):
            ds = IndexedDataset(data)
    finally:
        holder.kill()
        holder.wait()
    assert ([ds.describe(g)[1] for g in range(len(ds))], ds.labels.tolist()) == _expected()
    assert ds.index.path == "(built in memory)" and INDEX_NAME not in os.listdir(data)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "waited 0.5 s for another process building the dataset index" in warned[0]
    assert "waiting for it" in caplog.text


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a folder whatever its mode")
def test_a_read_only_data_folder_gets_its_index_in_the_cache(tmp_path):
    data = _data(tmp_path / "data")
    os.chmod(data, 0o555)
    try:
        ds = IndexedDataset(data, cache_dir=str(tmp_path / "cache"))
        assert ds.index.path.startswith(str(tmp_path / "cache")) and INDEX_NAME not in os.listdir(data)
        assert IndexedDataset(data, cache_dir=str(tmp_path / "cache")).index.path == ds.index.path
    finally:
        os.chmod(data, 0o755)


def test_shards_copied_from_the_old_index_equal_shards_read_again(tmp_path, caplog):
    """Class names, extensions and image suffixes of the shards kept from the old index are
    renumbered into the new one: it equals an index read from every shard."""
    data = tmp_path / "data"
    data.mkdir()
    names = [["cat", "dog"], ["eel", "cat"], ["fox", "gnu"]]
    for k, pair in enumerate(names):
        write_tar(str(data / f"s-{k}.tar"), [m for i, name in enumerate(pair) for m in [
            (f"k{k}-{i}.{'png' if i else 'jpg'}", _IMAGE), (f"k{k}-{i}.txt", name.encode()),
            (f"k{k}-{i}.json", b'{"i": %d}' % i)]])
    IndexedDataset(str(data))
    write_tar(str(data / "s-1.tar"), [("k1-0.jpg", _IMAGE), ("k1-0.txt", b"ant")])  # "eel" gone, "ant" new
    with caplog.at_level(logging.INFO, logger="turbofeed"):
        kept = IndexedDataset(str(data))
    assert "3 shards (1 read, 2 unchanged)" in caplog.text
    fresh = IndexedDataset(str(data), index=False)
    assert kept.index.header["label_names"] == ["ant", "cat", "dog", "fox", "gnu"]
    assert kept.class_names == fresh.class_names and kept.labels.tolist() == fresh.labels.tolist()
    for g in range(len(fresh)):
        assert (kept.describe(g), kept.image_name(g), kept.member_exts(g)) == \
            (fresh.describe(g), fresh.image_name(g), fresh.member_exts(g))
        assert kept.read(g) == fresh.read(g) and kept.read_member(g, "json") == fresh.read_member(g, "json")


@pytest.mark.parametrize("cores, threads", [(2, 8), (32, 32), (200, 64)])
def test_index_builds_use_every_core_they_may(monkeypatch, cores, threads):
    """Indexing checks each JPEG's scan (about 1 ms an image, without the GIL): builds
    take the cores this process may use, at least 8 (network reads overlap), at most 64."""
    from turbofeed.io.dsindex import build

    monkeypatch.setattr(build.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert build.default_threads() == threads
