"""Decompressed copies of local compressed shards live in the node cache, under its one
bound: a gzip bomb stops at the bound with a StorageError and leaves nothing over it, the
.part of a process killed mid-decompression is removed at the next start, and copies not
in use are evicted so that shards larger together than the bound take turns."""

from __future__ import annotations

import gzip
import io
import logging
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import zlib

import pytest
from builders import small_jpeg, tar_bytes

import turbofeed
from turbofeed.io import IndexedDataset
from turbofeed.io.local import compressed
from turbofeed.io.local.compressed import local_plain_copy, node_cache
from turbofeed.io.local.files import file_id
from turbofeed.io.stores.cache import CacheFull, ShardCache
from turbofeed.io.stores.config import S3Config

MiB = 1 << 20
ZEROS = bytes(16 * MiB)


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = size, 0
    return info.tobuf(format=tarfile.GNU_FORMAT)


def write_bomb(path: str, zero_mib: int) -> int:
    """A .tar.gz whose second sample's member holds ``zero_mib`` MiB of zeros, written as
    concatenated gzip members (one compressed block of zeros repeated: gzip readers
    inflate them as one stream), so a 300 MiB tar costs ~0.3 MB and no time to write.
    Returns the decompressed size."""
    assert zero_mib % 16 == 0
    head = tar_bytes([("a.jpg", small_jpeg(1)), ("a.cls", b"3")])[:-1024]  # without its end blocks
    block = gzip.compress(ZEROS, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(head + _header("b.bin", zero_mib * MiB), mtime=0))
        for _ in range(zero_mib // 16):
            f.write(block)
        f.write(gzip.compress(bytes(1024), mtime=0))  # end-of-archive blocks
    return len(head) + 512 + zero_mib * MiB + 1024


def _files_under(root: str) -> list[tuple[str, int]]:
    """(path, size) of every file under ``root`` but indexes and lock files (which the
    bound does not count); a .part's size is its reservation, at least what it holds."""
    out = []
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith((".json", ".lock")):
                continue
            st = os.stat(os.path.join(folder, name))
            out.append((os.path.join(folder, name), st.st_size))
    return out


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> str:
    out = str(tmp_path / "cache")
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", out)
    return out


def test_a_gzip_bomb_stops_at_the_bound_with_a_storage_error(tmp_path, cache_dir, monkeypatch):
    bomb = str(tmp_path / "bomb.tar.gz")
    plain = write_bomb(bomb, 304)  # 304 MiB of zeros ...
    assert os.path.getsize(bomb) < 400_000  # ... in under 0.4 MB
    bound = 16 * MiB
    monkeypatch.setenv("TURBOFEED_S3_CACHE_SIZE", str(bound))
    for on_damage in ("skip", "raise"):  # not bad data: raised whatever the mode
        with pytest.raises(turbofeed.StorageError) as caught:
            IndexedDataset(bomb, on_damage=on_damage)
        err = caught.value
        assert err.shard == bomb
        assert (f"its decompressed copy is over {bound} bytes (from {os.path.getsize(bomb)} compressed bytes), "
                "the node cache's bound") in str(err)
        assert "TURBOFEED_S3_CACHE_SIZE=SIZE" in str(err) and "S3Config(cache_max_bytes=...)" in str(err)
    monkeypatch.delenv("TURBOFEED_S3_CACHE_SIZE")  # the bound of an S3Config passed to a local dataset
    with pytest.raises(turbofeed.StorageError, match=f"over {bound} bytes"):
        IndexedDataset(bomb, storage=S3Config(cache_max_bytes=bound))
    files = _files_under(cache_dir)
    assert all(size <= bound for _, size in files) and sum(size for _, size in files) <= bound
    assert os.listdir(os.path.join(cache_dir, "s3", "tmp")) == []  # the partial copy is gone
    assert plain > 300 * MiB
    monkeypatch.setenv("TURBOFEED_S3_CACHE_SIZE", str(plain))  # the message's remedy works
    ds = IndexedDataset(bomb)
    assert len(ds) == 1 and ds.labels.tolist() == [3]  # b has no image: a problem, not a sample
    assert ds.read(0) == small_jpeg(1)


def test_a_fill_of_unknown_size_never_writes_past_the_bound(tmp_path):
    bound = 5 * MiB + 123
    cache = ShardCache(str(tmp_path), bound)
    sizes = []

    def endless(sink) -> None:
        while True:
            sink.write(b"\1" * MiB)
            sizes.append((os.fstat(sink.fd).st_size, sink.tell()))  # (reserved, written)
    with pytest.raises(CacheFull) as caught:
        cache.fill_stream("endless", endless)
    assert caught.value.over_bound and caught.value.bound == bound
    assert sizes and max(max(s) for s in sizes) <= bound
    assert sizes[-1][1] == 5 * MiB  # stopped before the sixth MiB
    assert os.listdir(cache.tmp) == [] and cache.lookup("endless") is None


def test_a_fill_of_unknown_size_that_fits_beside_copies_in_use_is_made(tmp_path):
    bound = 10 * MiB
    cache = ShardCache(str(tmp_path), bound)
    pinned = cache.fill_open("pinned", 7 * MiB, lambda fd: os.pwrite(fd, b"\2" * (7 * MiB), 0))
    try:
        fd = cache.fill_stream("fits", lambda sink: [sink.write(b"\3" * MiB) for _ in range(3)])
        os.close(fd)  # 7 + 3 MiB: exactly the bound, the pinned object untouched
        assert os.path.getsize(cache.path("fits")) == 3 * MiB and cache.lookup("pinned")
        with pytest.raises(CacheFull) as caught:  # one byte more has no room: only the pinned one could go
            cache.fill_stream("too-much", lambda sink: sink.write(b"\3" * (3 * MiB + 1)))
        assert not caught.value.over_bound and os.listdir(cache.tmp) == []
    finally:
        os.close(pinned)


def _kill_mid_decompression(tmp_path, cache_dir: str, bomb: str) -> str:
    """Run a child that opens ``bomb`` (room enough), SIGKILL it once its .part holds
    data; returns that .part's path."""
    code = textwrap.dedent(f"""
        from turbofeed.io import IndexedDataset
        IndexedDataset({bomb!r})
        print("finished")
    """)
    env = {**os.environ, "TURBOFEED_CACHE_DIR": cache_dir, "TURBOFEED_S3_CACHE_SIZE": str(4 << 30),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    tmp = os.path.join(cache_dir, "s3", "tmp")
    deadline = time.monotonic() + 60
    try:
        while True:
            assert proc.poll() is None, "the child finished before it was killed"
            assert time.monotonic() < deadline
            parts = os.listdir(tmp) if os.path.isdir(tmp) else []
            if parts and os.stat(os.path.join(tmp, parts[0])).st_blocks * 512 >= 16 * MiB:
                break
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    (part,) = os.listdir(tmp)
    return os.path.join(tmp, part)


def test_a_partial_copy_of_a_killed_process_is_removed_at_the_next_start(tmp_path, cache_dir):
    bomb = str(tmp_path / "big.tar.gz")
    write_bomb(bomb, 2048)  # 2 GiB to inflate: the child is killed well before the end
    part = _kill_mid_decompression(tmp_path, cache_dir, bomb)
    assert part.endswith(".part") and os.path.getsize(part) > 0  # left behind by the dead process
    assert not any(n.endswith(".plain.tar") for n in os.listdir(os.path.join(cache_dir, "s3", "objects")))
    small = tmp_path / "small.tar.gz"
    small.write_bytes(gzip.compress(tar_bytes([("x.jpg", small_jpeg(2)), ("x.cls", b"1")])))
    # the next start, in a fresh process, opening another shard
    code = f"from turbofeed.io import IndexedDataset; print(len(IndexedDataset({str(small)!r})))"
    out = subprocess.run([sys.executable, "-c", code],
                         env={**os.environ, "TURBOFEED_CACHE_DIR": cache_dir, "PYTHONPATH": os.pathsep.join(sys.path)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr
    assert not os.path.exists(part)
    assert os.listdir(os.path.join(cache_dir, "s3", "tmp")) == []


def _shard(seed: int, n: int) -> bytes:
    members = []
    for i in range(n):
        members += [(f"s{seed}-{i:03d}.jpg", small_jpeg(100 * seed + i)), (f"s{seed}-{i:03d}.cls", str(seed).encode())]
    return tar_bytes(members)


def test_copies_not_in_use_are_evicted_so_shards_larger_than_the_bound_take_turns(tmp_path, cache_dir, monkeypatch,
                                                                                  caplog):
    plain = [tmp_path / "a.tar", tmp_path / "b.tar"]
    for seed, p in enumerate(plain):
        p.write_bytes(_shard(seed, 30))
        (tmp_path / f"{p.name}.gz").write_bytes(gzip.compress(p.read_bytes(), mtime=0))
    size = max(os.path.getsize(p) for p in plain)
    bound = size + size // 2  # one copy fits, two do not
    monkeypatch.setenv("TURBOFEED_S3_CACHE_SIZE", str(bound))
    ds = IndexedDataset([str(tmp_path / "a.tar.gz"), str(tmp_path / "b.tar.gz")])
    want = IndexedDataset([str(p) for p in plain])
    assert len(ds) == len(want) == 60 and ds.labels.tolist() == want.labels.tolist()
    for i in (0, 30, 5, 35, 29, 59):  # alternately a's and b's samples: each copy made again
        assert ds.read(i) == want.read(i)
        assert sum(size for _, size in _files_under(cache_dir)) <= bound
    # each copy made to be indexed (the two in parallel), then again for (nearly) every turn
    assert all(3 <= src.plain.made <= 4 for src in ds.sources)
    # a whole shuffled epoch through the loader reads every sample once, within the bound,
    # and the loader warns that the copies take turns (decompressed again and again)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        loader = turbofeed.DataLoader([str(tmp_path / "a.tar.gz"), str(tmp_path / "b.tar.gz")], batch_size=10,
                                      num_workers=2, shuffle=True, seed=1, return_keys=True,
                                      transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(8)]))
    overflow = [r.getMessage() for r in caplog.records if "do not fit in the node cache" in r.getMessage()]
    assert len(overflow) == 1 and "2 compressed shards" in overflow[0] and f"({bound} bytes)" in overflow[0]
    keys = [k.rsplit("/", 1)[-1] for _, _, batch in loader for k in batch]
    assert sorted(keys) == sorted(f"s{s}-{i:03d}" for s in range(2) for i in range(30))
    assert sum(size for _, size in _files_under(cache_dir)) <= bound


def test_a_streamed_copy_waits_for_room_another_process_holds_and_a_plain_read_does_not(tmp_path, cache_dir,
                                                                                      monkeypatch):
    for seed in range(2):
        plain = _shard(seed, 30)
        (tmp_path / f"{seed}.tar.gz").write_bytes(gzip.compress(plain, mtime=0))
    bound = len(plain) + len(plain) // 2
    monkeypatch.setenv("TURBOFEED_S3_CACHE_SIZE", str(bound))
    first = IndexedDataset(str(tmp_path / "0.tar.gz"))
    first.close()  # its copy stays in the cache, unpinned
    cache = ShardCache(os.path.join(cache_dir, "s3"), bound)
    held = cache.open(first.sources[0].plain.name)  # pinned as another process would (no PlainCopy of ours)
    # indexing waits INDEX_WAIT_S for room (other processes' index pins are short), then
    # raises: that pin may last a dataset's life
    monkeypatch.setattr(compressed, "INDEX_WAIT_S", 0.3)
    try:
        with pytest.raises(turbofeed.StorageError, match="held by copies in use by this or other processes"):
            IndexedDataset(str(tmp_path / "1.tar.gz"))
    finally:
        let_go = threading.Timer(0.5, os.close, (held,))
        let_go.start()
    path = str(tmp_path / "1.tar.gz")
    copy = local_plain_copy(path, file_id(path), node_cache(cache_dir))
    t = time.monotonic()
    copy.hold(wait_s=30)  # streaming: waits until the other holder lets go (0.5 s)
    assert 0.3 < time.monotonic() - t < 20
    let_go.join()
    assert copy.made == 1 and os.path.exists(copy.path) and not os.path.exists(first.sources[0].plain.path)
    copy.release()


def test_no_overflow_warning_when_the_copies_fit_together(tmp_path, cache_dir, monkeypatch, caplog):
    for seed in range(2):
        (tmp_path / f"{seed}.tar.gz").write_bytes(gzip.compress(_shard(seed, 10), mtime=0))
    monkeypatch.setenv("TURBOFEED_S3_CACHE_SIZE", str(64 * MiB))
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        loader = turbofeed.DataLoader(str(tmp_path / "*.tar.gz"), batch_size=5, num_workers=1, shuffle=True)
    assert len(list(loader)) == 4
    assert not [r for r in caplog.records if "do not fit in the node cache" in r.getMessage()]
