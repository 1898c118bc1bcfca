"""io.local.writer: ShardWriter writes standard tars readable by tarfile and TarSource, publishes
each shard atomically, and leaves no partial shard when the writing code fails."""

from __future__ import annotations

import os
import tarfile

import pytest

from turbofeed.io import TarSource
from turbofeed.io.local.writer import ShardWriter


def _samples(images: dict[str, bytes], count: int) -> list[tuple[str, dict[str, bytes]]]:
    kinds = [("jpg", "rgb"), ("jpg", "gray"), ("png", "png_rgba")]
    return [(f"{i:04d}", {kinds[i % 3][0]: images[kinds[i % 3][1]], "cls": str(i % 4).encode()})
            for i in range(count)]


def test_shards_are_readable_by_tarfile_and_tarsource(tmp_path, odd_images):
    samples = _samples(odd_images, 7)
    with ShardWriter(str(tmp_path / "out" / "shard-%06d.tar"), per_shard=3) as writer:
        for key, members in samples:
            writer.write(key, members)
    assert writer.shards == [str(tmp_path / "out" / f"shard-{i:06d}.tar") for i in range(3)]
    assert sorted(os.listdir(tmp_path / "out")) == [f"shard-{i:06d}.tar" for i in range(3)]
    expected = iter(samples)
    for shard, count in zip(writer.shards, (3, 3, 1)):
        with tarfile.open(shard) as tf:
            names = tf.getnames()
            chunk = [next(expected) for _ in range(count)]
            assert names == [f"{k}.{ext}" for k, m in chunk for ext in m]
            for key, members in chunk:
                for ext, payload in members.items():
                    assert tf.extractfile(f"{key}.{ext}").read() == payload
        src = TarSource(shard, on_damage="raise", cache_dir=str(tmp_path))
        assert src.table.keys == [k for k, _ in chunk]
        assert src.table.labels == [int(m["cls"]) for _, m in chunk]
        assert [src.read(i) for i in range(count)] == [m.get("jpg", m.get("png")) for _, m in chunk]


def test_a_shard_is_invisible_until_complete(tmp_path, odd_images):
    pattern = str(tmp_path / "s-%02d.tar")
    writer = ShardWriter(pattern, per_shard=10)
    writer.write("a", {"jpg": odd_images["rgb"]})
    assert os.listdir(tmp_path) == ["s-00.tar.tmp"]
    writer.close()
    assert os.listdir(tmp_path) == ["s-00.tar"]


def test_exception_inside_with_leaves_no_partial_shard(tmp_path, odd_images):
    """Complete shards stay; the one being written disappears; the error propagates."""
    pattern = str(tmp_path / "s-%02d.tar")
    with pytest.raises(RuntimeError, match="boom"):
        with ShardWriter(pattern, per_shard=3) as writer:
            for i in range(4):
                writer.write(f"k{i}", {"jpg": odd_images["rgb"], "cls": b"1"})
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == ["s-00.tar"]
    assert TarSource(pattern % 0, on_damage="raise", cache_dir=str(tmp_path)).table.keys == \
        ["k0", "k1", "k2"]


def test_per_shard_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="per_shard"):
        ShardWriter(str(tmp_path / "s-%d.tar"), per_shard=0)
