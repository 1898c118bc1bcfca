"""io.dsindex: the compact dataset index (`turbofeed index DATA`) against the per-shard path.

Every comparison builds the same data twice, ``IndexedDataset(data)`` (from the index) and
``IndexedDataset(data, index=False)`` with the ``per_shard`` fixture (each shard indexed on its
own, as compressed shards still are), and requires the same
samples, labels, class names, member reads, problems and damage reports.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import shutil
import tarfile

import numpy as np
import pytest
from builders import small_jpeg, tar_bytes, write_tar

import turbofeed
from turbofeed.errors import DatasetError
from turbofeed.io import IndexedDataset, resolve
from turbofeed.io.columns import JoinedColumn, LabelColumn, StrColumn
from turbofeed.io.dsindex import INDEX_NAME, build_index, find
from turbofeed.io.local import tar as tar_module


def _sample(key: str, label: bytes | None, ext: str = "cls", image: str = "jpg", seed: int = 0) -> list:
    out = [(f"{key}.{image}", small_jpeg(seed))]
    return out + ([] if label is None else [(f"{key}.{ext}", label)])


def _int_labelled(folder) -> str:
    """Shards with every case the per-shard index handles: key folders and upper-case
    extensions, .cls/.json labels, JSON without a label, a bad label, a sample without an
    image, an oversized label, a cut shard, an empty file, an appended tar, a pax header
    (the tarfile path), a compressed shard (listed without samples)."""
    os.makedirs(folder, exist_ok=True)
    write_tar(f"{folder}/s-000.tar", _sample("d/x/k0", b"1") + _sample("d/x/k1", b"2", image="JPEG", seed=1)
              + _sample("k2", b"0", seed=2) + [("k2.txt", b"a caption")])
    write_tar(f"{folder}/s-001.tar", _sample("j0", json.dumps({"label": 3}).encode(), "json", seed=3)
              + _sample("j1", json.dumps({"url": "x"}).encode(), "json", "png", seed=4)
              + _sample("j2", b"abc", seed=5) + [("j3.cls", b"4")] + _sample("j4", b"9" * 70000, seed=6)
              + _sample("j5", b"5", seed=7))
    whole = tar_bytes(_sample("c0", b"1", seed=8) + _sample("c1", b"2", seed=9) + _sample("c2", b"3", seed=10))
    with open(f"{folder}/s-002.tar", "wb") as f:
        f.write(whole[:512 * 7 + 100])  # cut inside the third sample's image
    open(f"{folder}/s-003.tar", "wb").close()
    write_tar(f"{folder}/s-004.tar", _sample("a0", b"1", seed=11) + _sample("a1", b"1", seed=12))
    with tarfile.open(f"{folder}/s-004.tar", "a", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("a1.cls")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"7"))
    with tarfile.open(f"{folder}/s-005.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for name, payload in _sample("é0", b"6", seed=13) + _sample("p1", b"8", seed=14):
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    with open(f"{folder}/s-006.tar.gz", "wb") as f:
        f.write(gzip.compress(tar_bytes(_sample("z0", b"2", seed=15))))
    with open(f"{folder}/s-007.tar", "wb") as f:  # gzip under a plain name: told by its bytes
        f.write(gzip.compress(tar_bytes(_sample("z1", b"3", seed=16))))
    return str(folder)


def _same(a: IndexedDataset, b: IndexedDataset) -> None:
    """``a`` (from the index) delivers what ``b`` (per shard) delivers."""
    assert a.index is not None and b.index is None
    assert (a.num_samples, a.problems, a.damaged) == (b.num_samples, b.problems, b.damaged)
    assert (a.labels == b.labels).all() and a.class_names == b.class_names
    assert a.fingerprint_fields() == b.fingerprint_fields()
    for sa, sb in zip(a.sources, b.sources, strict=True):
        ta, tb = sa.table, sb.table
        assert (sa.path, sa.damage, ta.problems) == (sb.path, sb.damage, tb.problems)
        assert list(ta.keys) == list(tb.keys) and list(ta.image_names) == list(tb.image_names)
        assert list(ta.labels) == list(tb.labels)
        assert ta.offsets.tolist() == tb.offsets.tolist() and ta.sizes.tolist() == tb.sizes.tolist()
        assert [ta.exts_of(i) for i in range(len(ta))] == [tb.exts_of(i) for i in range(len(tb))]
    for g in range(len(a)):
        assert a.read(g) == b.read(g) and bytes(a.view(g)) == bytes(b.view(g))
        assert (a.describe(g), a.image_name(g), a.member_exts(g)) == (b.describe(g), b.image_name(g), b.member_exts(g))
        for ext in set(b.member_exts(g)) | {"seg.png"}:
            assert a.read_member(g, ext) == b.read_member(g, ext)


def test_tables_labels_and_reads_equal_the_per_shard_path(tmp_path, caplog, per_shard):
    data = _int_labelled(tmp_path / "data")
    done = build_index(data, cache_dir=str(tmp_path / "cache"), progress=False)
    assert done.path == os.path.join(data, INDEX_NAME) and done.shards == 8 and done.unindexed == 2
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        a = IndexedDataset(data, cache_dir=str(tmp_path / "cache"))
    assert not [r for r in caplog.records if "changed or added" in r.getMessage()]
    b = IndexedDataset(data, cache_dir=str(tmp_path / "cache"), index=False)
    _same(a, b)
    # j2 (bad label), j3 (no image), j4 (a label over 64 KiB, read from the shard: not an int64)
    # keep their ids and are bad samples when fetched
    assert len(a.sources[1].table) == 6 and sorted(a.sources[1].table.bad) == [2, 3, 4]
    assert set(a.damaged) == {f"{data}/s-002.tar", f"{data}/s-003.tar", f"{data}/s-004.tar"}
    assert isinstance(a.sources[0].table.keys, StrColumn) and isinstance(a.sources[0].table.labels, LabelColumn)
    assert isinstance(a.sources[0].table.image_names, JoinedColumn)
    _same(IndexedDataset(data, labels=False, cache_dir=str(tmp_path / "cache")),
          IndexedDataset(data, labels=False, cache_dir=str(tmp_path / "cache"), index=False))
    names = [str(i) for i in range(10)]
    _same(IndexedDataset(data, classes=names), IndexedDataset(data, classes=names, index=False))


def test_damage_raises_and_label_errors_read_the_same(tmp_path, per_shard):
    data = _int_labelled(tmp_path / "data")
    build_index(data, progress=False)
    errors = []
    for index in (None, False):
        with pytest.raises(DatasetError) as info:
            IndexedDataset(data, on_damage="raise", index=index)
        errors.append(str(info.value))
        with pytest.raises(DatasetError) as info:
            IndexedDataset(data, classes=["0", "1"], index=index)
        errors.append(str(info.value))
    assert errors[:2] == errors[2:]
    assert "s-002.tar: truncated or corrupt at byte offset" in errors[0]
    assert "labels not among the 2 classes given" in errors[1]


def test_class_names_and_mixed_labels(tmp_path, per_shard):
    data = tmp_path / "names"
    data.mkdir()
    for s, names in enumerate([["cat", "dog"], ["emu", "cat"]]):
        write_tar(str(data / f"n-{s}.tar"), [m for i, n in enumerate(names)
                                             for m in _sample(f"k{s}{i}", json.dumps({"label": n}).encode(), "json", seed=i)])
    build_index(str(data), progress=False)
    _same(IndexedDataset(str(data)), IndexedDataset(str(data), index=False))
    assert IndexedDataset(str(data)).class_names == ["cat", "dog", "emu"]
    _same(IndexedDataset(str(data), classes=["emu", "dog", "cat", "yak"]),
          IndexedDataset(str(data), classes=["emu", "dog", "cat", "yak"], index=False))
    write_tar(str(data / "n-2.tar"), _sample("k20", b"4"))
    build_index(str(data), progress=False)
    messages = []
    for index in (None, False):
        with pytest.raises(DatasetError, match="mixes integer labels") as info:
            IndexedDataset(str(data), index=index)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_fields_of_laion_shards_equal_the_per_shard_path(laion_shards, tmp_path, per_shard):
    paths, _ = laion_shards
    build_index(paths, progress=False)  # a list: written to the index cache
    a, b = IndexedDataset(paths, labels=False), IndexedDataset(paths, labels=False, index=False)
    _same(a, b)
    assert a.index.path.startswith(os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "dataset-index"))


def test_the_loader_builds_no_per_shard_index(tmp_path, monkeypatch, per_shard):
    data = _int_labelled(tmp_path / "data")
    os.remove(f"{data}/s-006.tar.gz")  # compressed shards are always indexed on their own
    os.remove(f"{data}/s-007.tar")
    build_index(data, progress=False)
    expected = IndexedDataset(data, index=False, cache_dir=str(tmp_path / "per-shard")).num_samples
    cache = tmp_path / "fresh-cache"

    def refuse(*args, **kwargs):
        raise AssertionError("a per-shard index was built")
    monkeypatch.setattr(tar_module, "index_shard", refuse)
    ds = IndexedDataset(data, cache_dir=str(cache))
    assert ds.num_samples == expected and ds.index is not None and not cache.exists()


def test_loader_epochs_are_the_same_with_and_without_the_index(shards, tmp_path):
    import turbofeed
    from turbofeed import transforms

    data = shutil.copytree(shards, str(tmp_path / "data"))

    def epoch() -> list:
        loader = turbofeed.DataLoader(turbofeed.Dataset(data, cache_dir=str(tmp_path / "cache")), batch_size=16,
                                      num_workers=2, shuffle=True, seed=5, return_keys=True,
                                      transform=transforms.imagenet_train(40))
        out = [(x.clone(), y.clone(), keys) for x, y, keys in loader]
        loader.close()
        return out
    without = epoch()
    build_index(data, progress=False)
    assert IndexedDataset(data).index is not None
    for (xa, ya, ka), (xb, yb, kb) in zip(epoch(), without, strict=True):
        assert ka == kb and (ya == yb).all() and (xa == xb).all()


def test_a_rewritten_and_an_added_shard_are_indexed_into_a_new_version(tmp_path, caplog):
    data = tmp_path / "data"
    data.mkdir()
    for s in range(3):
        write_tar(str(data / f"s-{s}.tar"), [m for i in range(4) for m in _sample(f"k{s}{i}", b"1", seed=s * 10 + i)])
    build_index(str(data), progress=False)
    with open(data / "s-1.tar", "wb") as f:  # rewritten in place: other samples, another size
        f.write(tar_bytes([m for i in range(6) for m in _sample(f"new{i}", b"2", seed=100 + i)]))
    (data / "s-3.tar").write_bytes(tar_bytes(_sample("added", b"3", seed=200)))
    old = os.stat(data / INDEX_NAME).st_ino
    with caplog.at_level(logging.INFO, logger="turbofeed"):
        ds = IndexedDataset(str(data))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "4 shards (2 read, 2 unchanged)" in caplog.text
    assert os.stat(data / INDEX_NAME).st_ino != old  # a new file, renamed over the old one
    assert [ds.describe(g)[1] for g in range(4, 10)] == [f"new{i}" for i in range(6)]
    assert ds.read(4) == small_jpeg(100) and ds.describe(len(ds) - 1)[1] == "added"
    assert ds.index.find("tar", str(data / "s-3.tar")) == 3 and ds.index.stale(ds._located) == []
    assert list(ds.labels) == [1] * 4 + [2] * 6 + [1] * 4 + [3]
    assert sorted(os.listdir(data)) == ["." + INDEX_NAME + ".lock"] + [f"s-{k}.tar" for k in range(4)] + [INDEX_NAME]


def test_refresh_reindexes_a_shard_rewritten_after_the_dataset_was_built(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for s in range(2):
        write_tar(str(data / f"s-{s}.tar"), [m for i in range(3) for m in _sample(f"k{s}{i}", b"1", seed=s * 10 + i)])
    build_index(str(data), progress=False)
    ds = IndexedDataset(str(data))
    assert ds.index is not None and ds.refresh() == []
    (data / "s-0.tar").write_bytes(tar_bytes(_sample("x", b"4", seed=50)))
    assert ds.refresh() == [str(data / "s-0.tar")]
    assert ds.num_samples == 4 and ds.read(0) == small_jpeg(50) and int(ds.labels[0]) == 4


def test_local_shards_without_an_index_get_one_without_a_hint(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(find, "_HINTED", set())
    few, many = tmp_path / "few", tmp_path / "many"
    for folder, count in ((few, 2), (many, 40)):  # a handful of shards too: it costs milliseconds
        folder.mkdir()
        for s in range(count):
            write_tar(str(folder / f"s-{s:03d}.tar"), _sample(f"k{s}", b"1", seed=s))
    with caplog.at_level(logging.INFO, logger="turbofeed"):
        for folder in (few, many):
            ds = IndexedDataset(str(folder))
            assert ds.index.path == str(folder / INDEX_NAME) and len(ds) == len(ds.sources)
    assert not [r for r in caplog.records if "no dataset index" in r.getMessage() or r.levelno >= logging.WARNING]


def test_the_file_is_compact_and_mapped_in_narrow_dtypes(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    payload = b"\xff\xd8" + bytes(98)  # 100-byte fake JPEGs: the index, not the data, is measured
    for s in range(4):
        members = [m for i in range(500) for m in ((f"{s * 500 + i:09d}.jpg", payload),
                                                    (f"{s * 500 + i:09d}.cls", str(i % 100).encode()))]
        write_tar(str(data / f"s-{s}.tar"), members)
    done = build_index(str(data), progress=False)
    assert done.samples == 2000 and done.bytes_per_sample < 60
    ds = IndexedDataset(str(data))
    a = ds.index.arrays
    assert a["offset"].dtype == np.uint32 and a["member_offset"].dtype == np.uint32
    assert a["size"].dtype == np.uint8 and a["label_value"].dtype == np.uint8 and a["label_kind"].dtype == np.uint8
    assert a["key_end"].dtype == np.uint32 and a["member_ext"].dtype == np.uint8
    assert all(arr.ctypes.data % 64 == 0 for arr in a.values() if arr.size)
    assert not a["offset"].flags.writeable  # views of the read-only map, not copies
    table = ds.sources[1].table
    assert table.keys[0] == "000000500" and table.keys[-1] == "000000999" and table.keys[1:3] == ["000000501", "000000502"]
    assert table.image_names[0] == "000000500.jpg" and table.labels[5] == 5 and len(table) == 500
    assert ds.index.shard_bytes().tolist() == [os.path.getsize(data / f"s-{s}.tar") for s in range(4)]


def test_the_resolver_never_takes_the_index_for_data(tmp_path, caplog):
    data = tmp_path / "data"
    data.mkdir()
    for s in range(2):
        write_tar(str(data / f"s-{s}.tar"), _sample(f"k{s}", b"1", seed=s))
    build_index(str(data), progress=False)
    assert (data / INDEX_NAME).is_file()
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        assert [p for _, p in resolve(str(data))] == [str(data / "s-0.tar"), str(data / "s-1.tar")]
        assert [p for _, p in resolve(str(data / "*"))] == [str(data / "s-0.tar"), str(data / "s-1.tar")]
        assert IndexedDataset(str(data / "s-{0..1}.tar")).index.path == str(data / INDEX_NAME)  # beside the shards
    assert not caplog.records
    with pytest.raises(DatasetError, match="a turbofeed dataset index, not data"):
        IndexedDataset(str(data / INDEX_NAME))


def test_patterns_go_to_the_index_cache_and_out_is_passed_as_index(tmp_path, caplog):
    data = tmp_path / "data"
    data.mkdir()
    for s in range(3):
        write_tar(str(data / f"s-{s}.tar"), _sample(f"k{s}", b"1", seed=s))
    cache = str(tmp_path / "cache")
    done = build_index(str(data / "s-{0..1}.tar"), cache_dir=cache, progress=False)
    assert done.path.startswith(os.path.join(cache, "dataset-index")) and done.shards == 2
    assert IndexedDataset(str(data / "s-{0..1}.tar"), cache_dir=cache).index.path == done.path
    assert IndexedDataset(str(data), cache_dir=cache).index.path == str(data / INDEX_NAME)  # another list: built
    out = str(tmp_path / "elsewhere" / "my.index")
    assert build_index(str(data), out=out, progress=False).path == out
    shutil.move(out, str(tmp_path / "moved.index"))  # names are absolute outside the data's folder
    ds = IndexedDataset(str(data), index=str(tmp_path / "moved.index"))
    assert ds.index.origin == str(tmp_path / "moved.index") and len(ds) == 3
    (data / "s-2.tar").write_bytes(tar_bytes(_sample("k2", b"1", seed=2) + _sample("k3", b"1", seed=3)))
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        assert len(IndexedDataset(str(data), index=str(tmp_path / "moved.index"))) == 4
    assert f"`turbofeed index {data} --out {tmp_path / 'moved.index'}`" in caplog.text
    with pytest.raises(DatasetError, match="no dataset index at"):
        IndexedDataset(str(data), index=str(tmp_path / "missing.index"))


def test_a_folder_copied_with_its_index_is_indexed_again(tmp_path, caplog):
    """A copy keeps sizes and mtimes, not inodes and ctimes: its shards are other files
    (test_index_trust.py: a folder renamed keeps using its index)."""
    data = tmp_path / "data"
    data.mkdir()
    for s in range(2):
        write_tar(str(data / f"s-{s}.tar"), _sample(f"k{s}", b"1", seed=s))
    build_index(str(data), progress=False)
    moved = shutil.copytree(str(data), str(tmp_path / "copy"))  # copy2: same sizes and mtimes
    with caplog.at_level(logging.INFO, logger="turbofeed"):
        ds = IndexedDataset(moved)
    assert ds.index.path == os.path.join(moved, INDEX_NAME) and ds.index.stale(ds._located) == []
    assert [s.path for s in ds.sources] == [os.path.join(moved, "s-0.tar"), os.path.join(moved, "s-1.tar")]
    assert "2 shards (2 read, 0 unchanged)" in caplog.text and list(ds.labels) == [1, 1]


def test_a_damaged_index_file_is_skipped_with_a_warning(tmp_path, caplog):
    data = tmp_path / "data"
    data.mkdir()
    write_tar(str(data / "s-0.tar"), _sample("k", b"1"))
    (data / INDEX_NAME).write_bytes(b"not an index at all, really, not one bit of it" * 3)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(str(data))
    assert ds.index.path == str(data / INDEX_NAME) and len(ds) == 1  # replaced by a good one
    assert [r.getMessage() for r in caplog.records] == [f"turbofeed: {data / INDEX_NAME}: not a turbofeed dataset "
                                                        "index; building it again"]
    (tmp_path / "images" / "cat").mkdir(parents=True)
    (tmp_path / "images" / "cat" / "a.jpg").write_bytes(small_jpeg(1))
    with pytest.raises(DatasetError, match="describes tar shards"):
        build_index(str(tmp_path / "images"), progress=False)


def test_columns_behave_like_lists():
    blob = np.frombuffer("ab\udcffcdé".encode("utf-8", "surrogateescape"), np.uint8)
    keys = StrColumn(blob, np.array([2, 3, 5, 7], np.uint32))
    assert list(keys) == ["ab", "\udcff", "cd", "é"] and keys[-1] == "é" and len(keys) == 4
    assert keys == ["ab", "\udcff", "cd", "é"] and keys != ["ab"] and keys[1:3] == ["\udcff", "cd"]
    with pytest.raises(IndexError):
        keys[4]
    tail = StrColumn(blob, np.array([5, 7], np.uint32), first=3)
    assert list(tail) == ["cd", "é"] and tail[0] == "cd"
    names = JoinedColumn(tail, np.array([1, 0], np.uint8), ["jpg", "JPEG"])
    assert list(names) == ["cd.JPEG", "é.jpg"] and names[1] == "é.jpg"
    labels = LabelColumn(np.array([0, 1, 2, 3], np.uint8), np.array([0, -7, 1, 0], np.int8), ["cat", "dog"])
    assert list(labels) == [None, -7, "dog", None] and "dog" in labels
    assert list(LabelColumn(None, None, (), n=3)) == [None, None, None]


# ----- s3:// ------------------------------------------------------------------------------
BUCKET = "tf-index"


@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto")
    pytest.importorskip("boto3")
    from turbofeed.testing import LocalS3Server

    with LocalS3Server() as server:
        from turbofeed.io.stores.client import S3Client
        from turbofeed.io.stores.config import S3Config

        with S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test")) as c:
            c.boto3_client().create_bucket(Bucket=BUCKET)
        yield server


@pytest.fixture
def s3(s3_server, point_aws_at):
    """``put(url, bytes)``, with the AWS variables pointing at the local server; the
    process's clients and listings are dropped after the test."""
    from turbofeed.io.retry import RetryPolicy
    from turbofeed.io.stores.config import S3Config, configure
    from turbofeed.io.stores.urls import close_clients, shared_client

    point_aws_at(s3_server.endpoint)
    configure(S3Config(retry=RetryPolicy(max_attempts=4, base_delay=0.005, max_delay=0.05)))
    yield lambda url, data: shared_client().put(url, data)
    close_clients()
    configure(S3Config())


def _shards_to(put, prefix: str, count: int, per: int = 3, first_seed: int = 0) -> list[bytes]:
    out = []
    for s in range(count):
        data = tar_bytes([m for i in range(per) for m in _sample(f"k{s}{i}", str(s + i).encode(),
                                                                    seed=first_seed + s * 10 + i)])
        put(f"{prefix}s-{s}.tar", data)
        out.append(data)
    return out


def _client_stats() -> dict:
    from turbofeed.io.stores.urls import shared_client

    return shared_client().stats.as_dict()


def test_s3_index_beside_the_prefix_starts_without_reading_a_shard(s3, tmp_path):
    prefix = f"s3://{BUCKET}/a/"
    _shards_to(s3, prefix, 3)
    s3(f"{prefix}s-3.tar.gz", gzip.compress(tar_bytes(_sample("z", b"1"))))
    done = build_index(prefix, progress=False)
    assert done.path == prefix + INDEX_NAME and (done.shards, done.samples, done.unindexed) == (4, 9, 1)
    before = _client_stats()
    ds = IndexedDataset(prefix, cache_dir=str(tmp_path / "fresh"))  # no local copy of the index yet
    after = _client_stats()
    assert ds.index.origin == prefix + INDEX_NAME
    assert after["requests"] - before["requests"] == 2 + 1  # LIST, the index's GET; the .tar.gz's GET
    assert after["shards_downloaded"] == before["shards_downloaded"] + 1  # the compressed one only
    assert after["cache_misses"] == before["cache_misses"]
    assert [len(s.table) for s in ds.sources] == [3, 3, 3, 1]
    assert [s.info.size for s in ds.sources[:3]] == ds.index.shard_bytes()[:3].tolist()
    reference = IndexedDataset(prefix, index=False, cache_dir=str(tmp_path / "per-shard"))
    _same(ds, reference)
    ds.close()  # stops their prefetch downloads, which the next counts must not see
    reference.close()
    again = _client_stats()
    IndexedDataset(prefix, cache_dir=str(tmp_path / "fresh")).close()  # the index's copy is local now
    now = _client_stats()
    assert (now["requests"] - again["requests"], now["bytes_read"] - again["bytes_read"]) == (1, 0)  # the LIST
    assert IndexedDataset(prefix + "s-*.tar").index.origin == prefix + INDEX_NAME  # a glob lists the folder too
    named = IndexedDataset([prefix + "s-0.tar", prefix + "s-1.tar"], index=prefix + INDEX_NAME)  # found with a HEAD
    assert named.index.origin == prefix + INDEX_NAME and len(named) == 6


def test_s3_index_copy_damaged_in_the_cache_is_refused_then_downloaded_again(s3, tmp_path, caplog):
    prefix = f"s3://{BUCKET}/damaged-copy/"
    _shards_to(s3, prefix, 2)
    build_index(prefix, cache_dir=str(tmp_path / "builder"), progress=False)
    cache = str(tmp_path / "cache")
    IndexedDataset(prefix, cache_dir=cache).close()  # downloads the index's copy
    folder = os.path.join(cache, "dataset-index", "s3")
    (copy,) = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".index")]
    with open(copy, "r+b") as f:  # one byte of its arrays flipped on disk
        f.seek(64)
        byte = f.read(1)[0]
        f.seek(64)
        f.write(bytes([byte ^ 0x01]))
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(prefix, cache_dir=cache)
    assert ds.index is None and f"{copy}: damaged dataset index (checksum mismatch)" in caplog.text
    assert [ds.describe(g)[1] for g in range(len(ds))] == ["k00", "k01", "k02", "k10", "k11", "k12"]
    assert list(ds.labels) == [0, 1, 2, 1, 2, 3]
    ds.close()
    again = IndexedDataset(prefix, cache_dir=cache)
    assert again.index is not None and list(again.labels) == [0, 1, 2, 1, 2, 3]
    again.close()


def test_s3_replaced_object_falls_back_with_a_warning_and_its_new_bytes(s3, tmp_path, caplog):
    prefix = f"s3://{BUCKET}/b/"
    _shards_to(s3, prefix, 2)
    build_index(prefix, progress=False)
    s3(f"{prefix}s-1.tar", tar_bytes(_sample("fresh", b"8", seed=77)))
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(prefix)
    warned = [r.getMessage() for r in caplog.records if "changed or added" in r.getMessage()]
    assert len(warned) == 1 and "s-1.tar" in warned[0] and f"`turbofeed index {prefix}`" in warned[0]
    assert ds.num_samples == 4 and ds.describe(3)[1] == "fresh" and ds.read(3) == small_jpeg(77)
    assert int(ds.labels[3]) == 8


def test_s3_without_put_rights_the_index_goes_to_the_cache(s3, tmp_path, monkeypatch, caplog):
    from turbofeed.io.retry import RemoteError
    from turbofeed.io.stores.client import S3Client

    prefix = f"s3://{BUCKET}/c/"
    _shards_to(s3, prefix, 2)

    def refused(self, url, size, read_part):
        raise RemoteError(f"PUT {url}: AccessDenied (status 403)")
    monkeypatch.setattr(S3Client, "upload", refused)
    done = build_index(prefix, progress=False)
    assert done.path.startswith(os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "dataset-index"))
    assert "AccessDenied" in done.note
    before = _client_stats()
    ds = IndexedDataset(prefix)
    assert ds.index.path == done.path and _client_stats()["requests"] - before["requests"] == 1  # the LIST
    monkeypatch.setattr(find, "_HINTED", set())
    with caplog.at_level(logging.INFO, logger="turbofeed"):
        IndexedDataset(f"s3://{BUCKET}/c/s-0.tar", index=None)
    assert any("no dataset index for s3://" in r.getMessage() for r in caplog.records)


def test_s3_index_copy_in_a_cache_others_can_write_is_not_used(s3, tmp_path, caplog):
    # the local copy of an s3:// index is a file in the index cache like any other: believed
    # only where others could not have replaced it
    prefix = f"s3://{BUCKET}/shared-cache/"
    _shards_to(s3, prefix, 2)
    build_index(prefix, cache_dir=str(tmp_path / "builder"), progress=False)
    cache = tmp_path / "cache"
    first = IndexedDataset(prefix, cache_dir=str(cache))  # downloads the index's copy
    assert first.index is not None
    first.close()
    cache.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        ds = IndexedDataset(prefix, cache_dir=str(cache))
    assert ds.index is None and list(ds.labels) == [0, 1, 2, 1, 2, 3]
    assert f"{cache} is writable by others (mode 0777, no sticky bit)" in caplog.text
    ds.close()


def test_the_index_covering_the_most_shards_is_used_and_one_covering_none_is_not(tmp_path):
    from turbofeed.io.dsindex.where import cached_path

    data, cache = tmp_path / "data", str(tmp_path / "cache")
    data.mkdir()
    shard = [str(data / f"s-{k}.tar") for k in range(2)]
    write_tar(shard[0], _sample("a", b"1"))
    mine = cached_path([("tar", p) for p in shard], cache)  # the cache's file for both shards
    build_index(str(data), out=mine, cache_dir=cache, progress=False)  # lists s-0 alone
    write_tar(shard[1], _sample("b", b"2", seed=1))
    ds = IndexedDataset(str(data), cache_dir=cache)  # nothing beside the data; the cache's covers 1 of 2
    assert ds.index.path == str(data / INDEX_NAME) and list(ds.labels) == [1, 2]  # built, s-0 from it
    os.unlink(data / INDEX_NAME)
    build_index(str(data), progress=False)  # beside the data, both shards: it wins
    assert IndexedDataset(str(data), cache_dir=cache).index.path == str(data / INDEX_NAME)
    os.unlink(data / INDEX_NAME)
    write_tar(str(data / "s-2.tar"), _sample("c", b"3", seed=2))
    build_index(str(data / "s-{0..1}.tar"), out=str(data / INDEX_NAME), progress=False)  # beside: 2 of 3
    mine3 = cached_path([("tar", p) for p in shard + [str(data / "s-2.tar")]], cache)
    build_index(str(data), out=mine3, cache_dir=cache, progress=False)  # the cache's: all 3
    assert IndexedDataset(str(data), cache_dir=cache).index.path == mine3  # a whole one after a partial one
    os.unlink(mine3)
    for k in range(3):  # renamed: the index beside lists none of them
        os.rename(data / f"s-{k}.tar", data / f"t-{k}.tar")
    ds = IndexedDataset(str(data), cache_dir=cache)
    assert ds.index.path == str(data / INDEX_NAME) and list(ds.labels) == [1, 2, 3]


def test_describe_names_a_list_by_its_first_path_and_count():
    assert find.describe("data/") == "data/"
    assert find.describe(["a.tar"]) == "a.tar"
    assert find.describe(["a.tar", "b.tar"]) == "a.tar ... (2 paths)"


def test_shards_kept_in_a_new_version_keep_exactly_their_own_members(tmp_path):
    """A new version of the index keeps the unchanged shards' rows without reading them
    (``parts.indexed_part``): each sample of a kept shard, one before another shard as
    much as the last, still has exactly its members, read back byte for byte."""
    data = tmp_path / "data"
    data.mkdir()

    def members(s: int, n: int, tag: str) -> list:
        return [m for i in range(n) for m in _sample(f"{tag}{s}{i}", b"1", seed=s * 10 + i)
                + [(f"{tag}{s}{i}.txt", f"caption {tag}{s}{i}".encode())]]

    for s in range(3):
        write_tar(str(data / f"s-{s}.tar"), members(s, 3, "k"))
    build_index(str(data), progress=False)
    (data / "s-1.tar").write_bytes(tar_bytes(members(1, 2, "new")))  # rewritten: s-0 and s-2 kept
    ds = IndexedDataset(str(data))
    assert ds.index is not None and len(ds) == 8
    for gid in range(len(ds)):
        key = ds.describe(gid)[1]
        assert sorted(ds.member_exts(gid)) == ["cls", "jpg", "txt"]
        assert ds.read_member(gid, "txt") == f"caption {key}".encode()


def test_an_index_written_to_a_folder_that_does_not_exist_yet_makes_it(tmp_path):
    """``turbofeed index DATA --out PATH`` (and the index cache's first write): the folders
    of PATH are made, the index is written whole and a loader takes it."""
    data = tmp_path / "data"
    data.mkdir()
    write_tar(str(data / "s-0.tar"), [m for i in range(3) for m in _sample(f"k{i}", b"1", seed=i)])
    out = tmp_path / "not" / "yet" / "there.index"
    build_index(str(data), out=str(out), progress=False)
    assert out.is_file()
    ds = IndexedDataset(str(data), index=str(out))
    assert ds.index is not None and len(ds) == 3


def test_an_index_the_user_names_is_used_wherever_it_lies(tmp_path):
    """index=PATH is the user's choice: taken even from a folder others may write (only
    the index cache's own files must be private to be believed)."""
    data = tmp_path / "data"
    data.mkdir()
    write_tar(str(data / "s-0.tar"), [m for i in range(3) for m in _sample(f"k{i}", b"1", seed=i)])
    shared = tmp_path / "shared"
    shared.mkdir()
    out = shared / "team.index"
    build_index(str(data), out=str(out), progress=False)
    os.chmod(shared, 0o777)
    os.chmod(out, 0o666)
    ds = IndexedDataset(str(data), index=str(out))
    assert ds.index is not None and os.path.samefile(ds.index.path, out)
