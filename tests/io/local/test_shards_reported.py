"""No input is ignored without a word: zero-byte shards, compressed shards beside plain
ones, duplicate member names (an appended tar) are read or reported (warning +
``stats.damaged_shards``, raised under ``on_error="raise"``)."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import shutil
import tarfile

import pytest
from builders import small_jpeg, tar_bytes

import turbofeed
from turbofeed import transforms as T
from turbofeed.io import IndexedDataset



def _samples(prefix: str, n: int, label: int) -> list[tuple[str, bytes]]:
    out = []
    for i in range(n):
        out += [(f"{prefix}{i:04d}.jpg", small_jpeg(ord(prefix[0]) * 100 + i)), (f"{prefix}{i:04d}.cls", str(label).encode())]
    return out


def _keys(loader) -> list[str]:
    return [k for _, _, keys in loader for k in keys]


def _loader(data, **kw):
    return turbofeed.DataLoader(data, batch_size=4, num_workers=2, transform=T.imagenet_eval(32),
                                return_keys=True, **kw)


@pytest.mark.parametrize("suffix,compress", [(".tar.gz", gzip.compress), (".tgz", gzip.compress),
                                             (".tar.bz2", bz2.compress), (".tar.xz", lzma.compress)])
def test_compressed_shards_beside_plain_ones_are_read(tmp_path, suffix, compress):
    (tmp_path / "shard-000000.tar").write_bytes(tar_bytes(_samples("a", 6, 1)))
    (tmp_path / f"shard-000001{suffix}").write_bytes(compress(tar_bytes(_samples("b", 5, 2))))
    loader = _loader(str(tmp_path))
    keys = _keys(loader)
    assert sorted(keys) == sorted([f"shard-000000.tar/a{i:04d}" for i in range(6)]
                                  + [f"shard-000001{suffix}/b{i:04d}" for i in range(5)])
    assert loader.stats.damaged_shards == []
    labels = {k: int(y) for _, ys, ks in loader for k, y in zip(ks, ys)}
    assert {v for k, v in labels.items() if "/b" in k} == {2}
    loader.close()


def test_a_gzip_shard_named_like_a_plain_one_and_by_pattern_is_read(tmp_path):
    (tmp_path / "packed.tar").write_bytes(gzip.compress(tar_bytes(_samples("c", 3, 0))))
    (tmp_path / "d.tgz").write_bytes(gzip.compress(tar_bytes(_samples("d", 2, 0))))
    ds = IndexedDataset([str(tmp_path / "packed.tar"), str(tmp_path / "*.tgz")])
    assert ds.num_samples == 5


def test_a_replaced_gzip_shard_is_decompressed_again(tmp_path):
    path = tmp_path / "s.tar.gz"
    path.write_bytes(gzip.compress(tar_bytes(_samples("e", 3, 1))))
    assert IndexedDataset(str(path)).labels.tolist() == [1, 1, 1]
    tmp = tmp_path / "new.tmp"
    tmp.write_bytes(gzip.compress(tar_bytes(_samples("e", 4, 5))))
    os.replace(tmp, path)
    assert IndexedDataset(str(path)).labels.tolist() == [5, 5, 5, 5]
    copies = os.listdir(os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3", "objects"))  # the node cache
    assert len([c for c in copies if c.endswith(".plain.tar")]) >= 1


def test_a_corrupt_gzip_shard_names_the_file(tmp_path):
    path = tmp_path / "bad.tar.gz"
    path.write_bytes(gzip.compress(tar_bytes(_samples("f", 3, 1)))[:-40])
    with pytest.raises(turbofeed.DatasetError, match="bad.tar.gz: corrupt or truncated gzip"):
        IndexedDataset(str(path))


def test_a_zero_byte_shard_is_reported_not_skipped(tmp_path, caplog):
    (tmp_path / "shard-000000.tar").write_bytes(tar_bytes(_samples("a", 4, 1)))
    (tmp_path / "shard-000001.tar").write_bytes(b"")
    empty = str(tmp_path / "shard-000001.tar")
    loader = _loader(str(tmp_path))
    assert loader.num_samples == 4
    assert loader.stats.damaged_shards == [empty]
    assert any(empty in r.getMessage() and "empty" in r.getMessage() for r in caplog.records)
    with pytest.raises(turbofeed.DatasetError, match="shard-000001.tar: empty file"):
        _loader(str(tmp_path), on_error="raise")
    loader.close()


def test_a_tar_without_samples_is_reported(tmp_path):
    (tmp_path / "shard-000000.tar").write_bytes(tar_bytes(_samples("a", 2, 1)))
    (tmp_path / "shard-000001.tar").write_bytes(tar_bytes([]))
    (tmp_path / "shard-000002.tar").write_bytes(tar_bytes([("x.cls", b"1")]))
    loader = _loader(str(tmp_path))
    assert loader.stats.damaged_shards == [str(tmp_path / "shard-000001.tar"), str(tmp_path / "shard-000002.tar")]
    loader.close()


def test_duplicate_member_names_use_the_last_copy_and_are_reported(tmp_path, caplog):
    """``tar -rf`` appends a newer copy after the old one; extraction keeps the last."""
    path = tmp_path / "appended.tar"
    first = _samples("k", 3, 1)
    path.write_bytes(tar_bytes(first))
    with tarfile.open(path, "a", format=tarfile.USTAR_FORMAT) as tar:  # a relabelled k0001
        info = tarfile.TarInfo("k0001.cls")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"7"))
    loader = _loader(str(path))
    labels = {k: int(y) for _, ys, ks in loader for k, y in zip(ks, ys)}
    assert labels == {"appended.tar/k0000": 1, "appended.tar/k0001": 7, "appended.tar/k0002": 1}
    assert loader.stats.damaged_shards == [str(path)]
    assert any("more than once" in r.getMessage() and "k0001.cls" in r.getMessage() for r in caplog.records)
    with pytest.raises(turbofeed.DatasetError, match="more than once"):
        _loader(str(path), on_error="raise")
    loader.close()


def test_a_zstd_shard_is_reported_with_the_fix(tmp_path):
    (tmp_path / "shard-000000.tar").write_bytes(tar_bytes(_samples("a", 2, 1)))
    (tmp_path / "shard-000001.tar.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 64)
    loader = _loader(str(tmp_path))
    assert loader.stats.damaged_shards == [str(tmp_path / "shard-000001.tar.zst")]
    with pytest.raises(turbofeed.DatasetError, match="zstd -d"):
        _loader(str(tmp_path), on_error="raise")
    shutil.rmtree(tmp_path)
