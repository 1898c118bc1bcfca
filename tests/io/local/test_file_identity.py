"""Shards that change under a running process: replaced by rename, rewritten in place with
the same size and mtime, truncated between epochs. Every cache (open files, maps, tar
indexes) keys on file identity, so a change is re-indexed, never read through stale
offsets or served from another file's descriptor."""

from __future__ import annotations

import os
import tarfile
import subprocess
import sys
import textwrap

import numpy as np
from builders import small_jpeg, write_tar

import turbofeed
from turbofeed import transforms as T
from turbofeed.io import load_index




def _shard(path: str, labels: list[int], *, seed: int = 0) -> str:
    """A shard of ``len(labels)`` 32x32 JPEGs (one colour pattern per seed) and .cls labels."""
    members = []
    for i, label in enumerate(labels):
        members.append((f"{i:06d}.jpg", small_jpeg(seed + i)))
        members.append((f"{i:06d}.cls", str(label).encode()))
    return write_tar(path, members)


def _publish(path: str, labels: list[int], *, seed: int) -> None:
    """Write a new shard beside ``path`` and rename it over ``path`` (a new inode)."""
    _shard(path + ".tmp", labels, seed=seed)
    os.replace(path + ".tmp", path)


def _labels(loader) -> dict[str, int]:
    out = {}
    for _, labels, keys in loader:
        out.update(zip(keys, labels.tolist()))
    return out


def _loader(path: str, **kw) -> turbofeed.DataLoader:
    return turbofeed.DataLoader(path, batch_size=4, num_workers=2, transform=T.imagenet_eval(32),
                                return_keys=True, **kw)


def test_a_shard_replaced_by_rename_is_read_anew_by_a_new_loader(tmp_path):
    path = str(tmp_path / "shard-000000.tar")
    _shard(path, [1] * 8)
    first = _loader(path)
    assert set(_labels(first).values()) == {1}  # its file is now open and mapped
    _publish(path, [7] * 8, seed=50)
    second = _loader(path)
    assert set(_labels(second).values()) == {7}
    pixels_new = next(iter(second))[0]
    third = _loader(path)  # and the index saved for later runs describes the new file
    assert set(_labels(third).values()) == {7}
    assert [row[4][1] for row in load_index(path)["rows"]] == ["7"] * 8
    assert np.array_equal(next(iter(third))[0].numpy(), pixels_new.numpy())
    first.close()
    second.close()
    third.close()


def test_a_rewrite_in_place_with_the_same_size_and_mtime_is_reindexed(tmp_path):
    """``cp -p``/``rsync -t`` keep the mtime; the size is the same when only labels
    change. The inode change time (ctime) still tells."""
    path = str(tmp_path / "shard-000000.tar")
    _shard(path, [1, 2, 3, 4])
    loader = _loader(path)
    assert sorted(_labels(loader).values()) == [1, 2, 3, 4]
    loader.close()
    stat = os.stat(path)
    rewritten = _relabel(path, {0: 5, 1: 6})
    with open(path, "r+b") as f:  # the same inode, the same size
        f.write(rewritten)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(path).st_size == stat.st_size and os.stat(path).st_mtime_ns == stat.st_mtime_ns
    again = _loader(path)
    assert sorted(_labels(again).values()) == [3, 4, 5, 6]
    again.close()


def _relabel(path: str, new: dict[int, int]) -> bytes:
    """The shard's bytes with the one-digit .cls payload of sample ``i`` set to ``new[i]``."""
    data = bytearray(open(path, "rb").read())
    with tarfile.open(path) as tar:
        for info in tar:
            if info.name.endswith(".cls") and int(info.name[:6]) in new:
                assert info.size == 1
                data[info.offset_data] = ord(str(new[int(info.name[:6])]))
    return bytes(data)


def test_the_shard_index_records_its_identity_and_caches_nothing(tmp_path):
    path = str(tmp_path / "s.tar")
    _shard(path, [1, 2])
    cache = str(tmp_path / "cache")
    index = load_index(path, cache)
    for field in ("dev", "ino", "size", "mtime_ns", "ctime_ns"):
        assert field in index["file"], field
    assert not os.path.exists(cache)  # the per-shard cache is gone: loaders map the dataset index


TRUNCATE_BETWEEN_EPOCHS = textwrap.dedent("""
    import os, sys, logging
    import turbofeed
    from turbofeed import transforms as T
    logging.basicConfig(level=logging.WARNING)
    path = sys.argv[1]
    loader = turbofeed.DataLoader(path, batch_size=4, num_workers=2, transform=T.imagenet_eval(32),
                                  return_keys=True)
    first = [k for _, _, keys in loader for k in keys]
    with open(path, "r+b") as f:          # truncated in place, mapped by the loader
        f.truncate(os.path.getsize(path) // 2)
    second = [k for _, _, keys in loader for k in keys]
    print("EPOCHS", len(first), len(second), len(set(second)), loader.num_samples, len(loader),
          loader.stats.damaged_shards == [path])
""")


def test_a_shard_truncated_between_epochs_is_reindexed_not_a_crash(tmp_path):
    """Under memory-mapped reads a truncated shard used to kill the process with SIGBUS
    in the next epoch; now the epoch starts by checking every shard's identity."""
    path = _shard(str(tmp_path / "shard-000000.tar"), list(range(10)) * 4)
    env = dict(os.environ, TURBOFEED_MMAP="1")
    proc = subprocess.run([sys.executable, "-c", TRUNCATE_BETWEEN_EPOCHS, path], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    words = [line for line in proc.stdout.splitlines() if line.startswith("EPOCHS")][0].split()
    first, second, unique, num_samples, steps, reported = words[1:]
    assert int(first) == 40
    assert 0 < int(second) == int(unique) == int(num_samples) < 40  # the samples before the cut
    assert int(steps) == -(-int(num_samples) // 4)
    assert reported == "True"
    assert "changed on disk" in proc.stderr and path in proc.stderr


def test_a_shard_replaced_while_a_loader_is_open_is_not_read_through_old_offsets(tmp_path):
    """Renamed over between two epochs of the same loader: the next epoch re-indexes it."""
    path = str(tmp_path / "shard-000000.tar")
    _shard(path, [1] * 8)
    loader = _loader(path)
    assert set(_labels(loader).values()) == {1}
    _publish(path, [3] * 12, seed=100)
    labels = _labels(loader)
    assert len(labels) == 12 and set(labels.values()) == {3}
    assert loader.num_samples == 12 and len(loader) == 3
    loader.close()


def test_a_pipeline_restarted_after_a_replacement_reads_the_new_shard(tmp_path):
    path = str(tmp_path / "shard-000000.tar")
    _shard(path, [1] * 6)
    pipe = turbofeed.Pipeline(path, num_workers=2)
    pipe.start()
    assert {s.label for s in pipe.next_batch(100)} == {1}
    pipe.stop()
    _publish(path, [4] * 9, seed=30)
    pipe.start()
    assert [s.label for s in pipe.next_batch(100)] == [4] * 9
    pipe.stop()
