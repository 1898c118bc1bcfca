"""io.stores.cache: the node's shard cache under concurrent writers (separate processes filling
the same object: one download, one atomic publish, never a partial file visible), a
writer killed mid-fill, failed writes, and the LRU size bound."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from turbofeed.io.stores import cache as cache_module
from turbofeed.io.stores.cache import ShardCache, object_name

# A child process imports only io/stores/cache.py (stdlib only), so it starts in milliseconds.
CHILD = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from turbofeed.io.stores import cache
root, name, size, log, go, hang = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7] == "1"
content = (bytes(range(256)) * (size // 256 + 1))[:size]
while not os.path.exists(go):
    time.sleep(0.002)

def write(fd):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    for pos in range(0, size, 64 << 10):
        os.pwrite(fd, content[pos:pos + (64 << 10)], pos)
        time.sleep(30 if hang else 0.01)

print(cache.ShardCache(root, max_bytes=size * 4).fill(name, size, write), flush=True)
"""
SIZE = 1 << 20
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(cache_module.__file__))))
CONTENT = (bytes(range(256)) * (SIZE // 256 + 1))[:SIZE]


def _start(tmp_path, n: int, *, hang: bool = False) -> list[subprocess.Popen]:
    return [subprocess.Popen(
        [sys.executable, "-c", CHILD, SRC, str(tmp_path / "cache"), "obj.tar",
         str(SIZE), str(tmp_path / "writers.log"), str(tmp_path / "go"), "1" if hang else "0"],
        stdout=subprocess.PIPE, text=True) for _ in range(n)]


def test_concurrent_processes_fill_one_object_once_and_never_show_a_partial_file(tmp_path):
    procs = _start(tmp_path, 4)
    objects = tmp_path / "cache" / "objects"
    (tmp_path / "go").touch()
    seen_whole = 0
    deadline = time.monotonic() + 60
    while any(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, "fillers did not finish"
        if objects.exists():
            names = {e.name for e in os.scandir(objects)}
            assert names <= {"obj.tar", "obj.tar.lock"}
            if "obj.tar" in names:
                assert (objects / "obj.tar").read_bytes() == CONTENT  # whole, or not there
                seen_whole += 1
        time.sleep(0.005)
    paths = {p.communicate(timeout=10)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert paths == {str(objects / "obj.tar")}
    assert len((tmp_path / "writers.log").read_text().split()) == 1  # one download
    assert (objects / "obj.tar").read_bytes() == CONTENT
    assert os.listdir(tmp_path / "cache" / "tmp") == []


def test_a_writer_killed_mid_fill_publishes_nothing_and_the_next_fill_succeeds(tmp_path):
    (proc,) = _start(tmp_path, 1, hang=True)
    (tmp_path / "go").touch()
    tmp = tmp_path / "cache" / "tmp"
    deadline = time.monotonic() + 30
    while not (tmp_path / "writers.log").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert len(os.listdir(tmp)) == 1  # the dead writer's .part
    cache = ShardCache(str(tmp_path / "cache"), max_bytes=4 * SIZE)
    assert cache.lookup("obj.tar") is None and os.listdir(tmp) == []  # removed when the cache opens
    writes = []

    def write(fd: int) -> None:
        writes.append(fd)
        os.pwrite(fd, CONTENT, 0)
    path = cache.fill("obj.tar", SIZE, write)
    with open(path, "rb") as f:
        assert len(writes) == 1 and f.read() == CONTENT
    assert os.listdir(tmp) == []


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    cache = ShardCache(str(tmp_path), max_bytes=10 * SIZE)

    def write(fd: int) -> None:
        os.pwrite(fd, b"half", 0)
        raise OSError("connection lost")
    with pytest.raises(OSError, match="connection lost"):
        cache.fill("x.tar", SIZE, write)
    assert cache.lookup("x.tar") is None and os.listdir(cache.tmp) == []
    assert cache.used_bytes() == 0


def test_lru_eviction_keeps_the_cache_within_its_bound(tmp_path):
    cache = ShardCache(str(tmp_path), max_bytes=3 * 1000)

    def filler(byte: bytes):
        return lambda fd: os.pwrite(fd, byte * 1000, 0)
    for k, name in enumerate(["a", "b", "c"]):
        cache.fill(name, 1000, filler(name.encode()))
        os.utime(cache.path(name), (1000 + k, 1000 + k))  # a oldest, c newest
    os.utime(cache.path("a"), (2000, 2000))  # a read recently: b is now the oldest
    cache.fill("d", 1000, filler(b"d"))
    assert cache.lookup("b") is None and cache.evictions == 1
    assert all(cache.lookup(n) for n in "acd") and cache.used_bytes() == 3000
    assert cache.fill("huge", 3001, filler(b"h")) is None  # can never fit: refused, nothing evicted
    assert cache.used_bytes() == 3000


def test_stale_parts_of_dead_processes_do_not_count_forever(tmp_path):
    cache = ShardCache(str(tmp_path), max_bytes=2000)
    stale = os.path.join(cache.tmp, "index.123.456.tar")
    with open(stale, "wb") as f:
        f.truncate(1500)
    os.utime(stale, (time.time() - 2 * 3600,) * 2)
    cache.fill("x", 1000, lambda fd: os.pwrite(fd, b"x" * 1000, 0))
    assert not os.path.exists(stale) and cache.lookup("x")


def test_object_names_change_with_the_object_version():
    a = object_name("s3://b/train/shard-000001.tar", "etag1", 10, ".tar")
    assert a.endswith("-shard-000001.tar.tar") and "/" not in a
    assert a != object_name("s3://b/train/shard-000001.tar", "etag2", 10, ".tar")
    assert a != object_name("s3://b/train/shard-000001.tar", "etag1", 11, ".tar")
    assert a != object_name("s3://b/val/shard-000001.tar", "etag1", 10, ".tar")


def test_the_data_is_synced_to_disk_before_the_name_is_published(tmp_path, monkeypatch):
    """A power loss cannot be staged in a test, so this watches the order of the two
    syscalls that make publishing durable: fsync of the part file, then the rename."""
    calls: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        calls.append("fsync")
        real_fsync(fd)

    def rename(src, dst):
        calls.append("rename")
        real_rename(src, dst)

    monkeypatch.setattr(cache_module.os, "fsync", fsync)
    monkeypatch.setattr(cache_module.os, "rename", rename)
    path = ShardCache(str(tmp_path / "c"), max_bytes=SIZE * 2).fill("obj.tar", SIZE, lambda fd: os.pwrite(fd, CONTENT, 0))
    assert calls == ["fsync", "rename"]
    with open(path, "rb") as f:
        assert f.read() == CONTENT


def test_concurrent_fills_never_hold_more_than_the_bound(tmp_path):
    """6 threads fill 6 different objects at once into room for 3: fills in progress
    count against the bound, so 3 are published and 3 refused (their readers go to the
    network), and the cache never holds more than its bound."""
    import threading

    cache = ShardCache(str(tmp_path), max_bytes=3 * 1000)
    seen: list[int] = []
    results: dict[str, str | None] = {}
    writing: list[int] = []
    release = threading.Event()

    def write(fd: int) -> None:
        writing.append(fd)
        seen.append(cache.used_bytes())
        os.pwrite(fd, b"x" * 1000, 0)
        release.wait(10)  # every fill in progress until all 6 have reserved or been refused
        seen.append(cache.used_bytes())

    def one(name: str) -> None:
        results[name] = cache.fill(name, 1000, write)
    threads = [threading.Thread(target=one, args=(f"obj{k}",)) for k in range(6)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(writing) + len(results) < 6 and time.monotonic() < deadline:
        time.sleep(0.005)
    release.set()
    for t in threads:
        t.join(10)
    assert max(seen) <= 3000, f"the cache held {max(seen)} bytes, bound 3000"
    published = [n for n, path in results.items() if path is not None]
    assert len(results) == 6 and len(published) == 3
    assert cache.used_bytes() == 3000 and os.listdir(cache.tmp) == []


def test_an_object_in_use_is_never_evicted(tmp_path):
    """A descriptor from ``open`` pins the object: eviction takes the least recently used
    object not in use, refuses a fill that only the pinned bytes would make room for,
    and the pinned file stays whole and readable by name."""
    cache = ShardCache(str(tmp_path), max_bytes=2 * 1000)
    for k, name in enumerate("ab"):
        cache.fill(name, 1000, lambda fd, b=name.encode(): os.pwrite(fd, b * 1000, 0))
        os.utime(cache.path(name), (1000 + k, 1000 + k))  # a is the oldest
    fd = cache.open("a")
    assert fd is not None and os.pread(fd, 4, 0) == b"aaaa"
    assert cache.fill("c", 1000, lambda fd: os.pwrite(fd, b"c" * 1000, 0))
    assert cache.lookup("b") is None and cache.lookup("a")  # b evicted, not the older a
    assert cache.fill("big", 2000, lambda fd: os.pwrite(fd, b"g" * 2000, 0)) is None
    assert cache.lookup("a") and cache.lookup("c")  # a refused fill evicts nothing
    with open(cache.path("a"), "rb") as f:
        assert f.read() == b"a" * 1000
    os.close(fd)
    assert cache.fill("big", 2000, lambda fd: os.pwrite(fd, b"g" * 2000, 0))
    assert cache.lookup("a") is None and cache.open("a") is None
