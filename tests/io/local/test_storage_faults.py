"""Local three that change or vanish in the middle of a pass: each is a storage fault, not
bad data. The pass stops with a StorageError naming the shard, whatever ``on_error`` says,
instead of replacing or skipping the shard's samples (which used to turn them into
duplicates of others); a shard truncated in place under the default settings raises it
too, never kills the process with SIGBUS; a state taken before resumes exactly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from builders import small_jpeg, write_tar

import turbofeed
from turbofeed import transforms as T

SHARDS, PER_SHARD, BATCH = 3, 12, 4


def _shard(path: str, first: int, count: int, *, seed: int = 0) -> str:
    members = []
    for i in range(first, first + count):
        members.append((f"{i:06d}.jpg", small_jpeg(seed + i)))
        members.append((f"{i:06d}.cls", str(i % 5).encode()))
    return write_tar(path, members)


@pytest.fixture
def three(tmp_path) -> list[str]:
    return [_shard(str(tmp_path / f"shard-{s}.tar"), s * PER_SHARD, PER_SHARD) for s in range(SHARDS)]


def _loader(paths, tmp_path, **kw) -> turbofeed.DataLoader:
    kw.setdefault("shuffle", False)
    return turbofeed.DataLoader(turbofeed.Dataset(paths, cache_dir=str(tmp_path / "cache")), batch_size=BATCH,
                                num_workers=2, prefetch=1, transform=T.imagenet_eval(32),
                                return_keys=True, **kw)


def _keys(batch) -> list[str]:
    return [k.rsplit("/", 1)[-1] for k in batch[2]]


def _rename_over(path: str) -> None:
    _shard(path + ".new", 900, PER_SHARD, seed=500)  # other images, other sizes
    os.replace(path + ".new", path)


def _rewrite_in_place(path: str) -> None:
    with open(path, "r+b") as f:  # same inode, same size: only the bytes (and ctime) change
        f.seek(1024)
        f.write(b"\0" * 512)


def _truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 3)


CHANGES = {"renamed over": _rename_over, "rewritten in place": _rewrite_in_place,
           "truncated": _truncate, "deleted": os.remove}
REASONS = {"renamed over": "replaced", "rewritten in place": "rewritten", "truncated": "truncated from",
           "deleted": "vanished"}


@pytest.mark.parametrize("on_error", ["replace", "skip", "raise"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_shard_changed_while_it_is_read_raises_storage_error(three, tmp_path, change, on_error):
    """Shard 0 is open and half read when it changes: the open descriptor would still read
    the old inode (rename, delete) or the new bytes at the old offsets (rewrite)."""
    loader = _loader(three, tmp_path, on_error=on_error)
    it = iter(loader)
    seen = _keys(next(it))
    CHANGES[change](three[0])
    with pytest.raises(turbofeed.StorageError) as info:
        for batch in it:
            seen += _keys(batch)
    assert info.value.shard == three[0] and three[0] in str(info.value)
    assert info.value.reason.startswith(REASONS[change]), info.value.reason
    assert str(info.value).startswith("storage: ")
    assert len(seen) == len(set(seen)) < PER_SHARD  # nothing replaced by a duplicate, no shard skipped over
    assert seen == [f"{i:06d}" for i in range(len(seen))]
    assert not loader.stats.errors and loader.stats.replaced == 0


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_shard_changed_before_its_turn_raises_storage_error(three, tmp_path, change):
    """Shard 2, not opened yet in this pass, changes: its first read finds another file."""
    loader = _loader(three, tmp_path)
    it = iter(loader)
    seen = _keys(next(it))
    CHANGES[change](three[2])
    with pytest.raises(turbofeed.StorageError, match="shard-2.tar") as info:
        for batch in it:
            seen += _keys(batch)
    assert info.value.shard == three[2] and info.value.reason.startswith(REASONS[change])
    assert seen == [f"{i:06d}" for i in range(2 * PER_SHARD)]  # every sample before it, once


def test_a_new_pass_reindexes_the_changed_shard(three, tmp_path):
    """After the error, the next pass starts by indexing the shard again."""
    loader = _loader(three, tmp_path)
    it = iter(loader)
    next(it)
    _rename_over(three[1])
    with pytest.raises(turbofeed.StorageError):
        list(it)
    keys = [k for batch in loader for k in _keys(batch)]
    assert len(keys) == SHARDS * PER_SHARD == len(set(keys))
    assert f"{900:06d}" in keys and f"{PER_SHARD:06d}" not in keys


def test_a_state_taken_before_a_vanished_shard_resumes_exactly_once_it_is_back(three, tmp_path):
    kw = dict(shuffle=True, seed=3)
    full = [k for batch in _loader(three, tmp_path, **kw) for k in _keys(batch)]
    loader = _loader(three, tmp_path, **kw)
    it = iter(loader)
    k = 2
    seen = [key for _ in range(k) for key in _keys(next(it))]
    state = loader.state_dict()
    shutil.move(three[1], str(tmp_path / "away.tar"))  # an unmounted file system, a sync in progress
    with pytest.raises(turbofeed.StorageError, match="vanished"):
        for batch in it:
            seen += _keys(batch)
    assert len(seen) == len(set(seen)) and set(seen) <= set(full)
    shutil.move(str(tmp_path / "away.tar"), three[1])
    resumed = _loader(three, tmp_path, **kw)
    resumed.load_state_dict(state)
    rest = [key for batch in resumed for key in _keys(batch)]
    assert rest == full[k * BATCH:]


def test_an_image_deleted_from_a_folder_raises_storage_error(tmp_path):
    root = tmp_path / "folder"
    for c in range(2):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(8):
            (root / f"c{c}" / f"{i}.jpg").write_bytes(small_jpeg(10 * c + i))
    loader = turbofeed.DataLoader(str(root), batch_size=4, num_workers=2, prefetch=1, shuffle=False,
                                  transform=T.imagenet_eval(32), on_error="skip")
    it = iter(loader)
    next(it)
    os.remove(root / "c1" / "5.jpg")
    with pytest.raises(turbofeed.StorageError, match="c1/5.jpg: vanished"):
        list(it)


def test_the_pipeline_raises_storage_error_too(tmp_path):
    paths = [_shard(str(tmp_path / f"p-{s}.tar"), s * 100, 100) for s in range(2)]
    pipe = turbofeed.Pipeline(paths, num_workers=2, prefetch=1, shuffle=False, on_error="skip")
    pipe.start()
    keys = [s.key for s in pipe.next_batch(4)]
    os.remove(paths[1])
    with pytest.raises(turbofeed.StorageError, match="p-1.tar: vanished"):
        while batch := pipe.next_batch(4):
            keys += [s.key for s in batch]
    pipe.stop()
    assert keys == [f"{i:06d}" for i in range(len(keys))] and len(keys) <= 100


TRUNCATE_MID_PASS = textwrap.dedent("""
    import os, sys
    import turbofeed
    from turbofeed import transforms as T
    path = sys.argv[1]
    loader = turbofeed.DataLoader(path, batch_size=4, num_workers=2, prefetch=1, shuffle=False,
                                  transform=T.imagenet_eval(32), return_keys=True)
    it = iter(loader)
    next(it)
    with open(path, "r+b") as f:         # cut in place, under the loader's feet
        f.truncate(os.path.getsize(path) // 4)
    try:
        for batch in it:
            pass
    except turbofeed.StorageError as exc:
        print("STORAGE", exc.shard == path, exc)
    else:
        print("NO ERROR")
""")


def test_a_shard_truncated_mid_pass_raises_and_never_kills_the_process(tmp_path):
    """Default settings, native decoder on: this used to die by SIGBUS (memory-mapped reads)."""
    path = _shard(str(tmp_path / "big.tar"), 0, 64)
    env = {k: v for k, v in os.environ.items() if k != "TURBOFEED_MMAP"}
    env["TURBOFEED_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-c", TRUNCATE_MID_PASS, path], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "STORAGE True storage: " in proc.stdout and "truncated from" in proc.stdout, proc.stdout
