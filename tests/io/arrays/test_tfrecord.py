"""io.arrays.tfrecord: TFRecord files of tf.train.Example records, written here by a small
encoder of our own (no TensorFlow), read through the loader: every image and label once,
format=, feature names, cut and corrupt files reported, the index cached by identity."""

from __future__ import annotations

import logging
import os
import struct

import numpy as np
import pytest
from builders import small_jpeg

import turbofeed
from turbofeed.decode import decode
from turbofeed.errors import DatasetError
from turbofeed.io import IndexedDataset, TFRecordSource, resolve
from turbofeed.io.arrays import tfrecord
from turbofeed.io.arrays.tfrecord_wire import crc32c, masked_crc32c


# -- a minimal writer, independent of the reader ---------------------------------------
def _crc32c_bitwise(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    crc = _crc32c_bitwise(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _feature(value) -> bytes:
    if isinstance(value, bytes):
        return _field(1, _field(1, value))  # bytes_list
    if isinstance(value, float):
        return _field(2, _field(1, struct.pack("<f", value)))  # float_list, packed
    if isinstance(value, tuple):  # int64_list, not packed
        return _field(3, b"".join(_varint(1 << 3) + _varint(v) for v in value))
    return _field(3, _field(1, _varint(value)))  # int64_list, packed


def example(features: dict) -> bytes:
    """A serialized tf.train.Example, with an unknown field the reader must skip."""
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, _feature(v)))
                       for name, v in features.items())
    return _varint(7 << 3) + _varint(300) + _field(1, entries)


def frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked(length)) + data + struct.pack("<I", _masked(data))


def imagenet(seed: int, label: int, **extra) -> dict:
    return {"image/encoded": small_jpeg(seed), "image/class/label": label, "image/format": b"JPEG",
            "image/height": 32, **extra}


def write(path, records: list[dict]) -> str:
    with open(path, "wb") as f:
        for r in records:
            f.write(frame(example(r)))
    return str(path)


# -- tests -----------------------------------------------------------------------------
def test_crc32c_and_its_mask():
    assert crc32c(b"123456789") == 0xE3069283 == _crc32c_bitwise(b"123456789")
    assert masked_crc32c(b"\x05\0\0\0\0\0\0\0") == _masked(b"\x05\0\0\0\0\0\0\0")


def test_a_folder_of_files_gives_every_image_and_label_once(tmp_path):
    torch = pytest.importorskip("torch")
    import turbofeed
    from turbofeed import transforms as T

    expected = {}
    for name, seeds in (("train-0.tfrecord", range(0, 5)), ("train-1.tfrec", range(5, 9)),
                        ("train-2.tfrecords", range(9, 12))):
        records = [imagenet(s, (s * 7 % 5,) if s % 2 else s * 7 % 5, **{"image/score": 0.5}) for s in seeds]
        write(tmp_path / name, records)
        expected.update({f"{name}/{i:08d}": (small_jpeg(s), s * 7 % 5) for i, s in enumerate(seeds)})
    (tmp_path / "README.txt").write_text("not a record file")
    assert [k for k, _ in resolve(str(tmp_path))] == ["tfrecord"] * 3
    loader = turbofeed.DataLoader(turbofeed.Dataset(str(tmp_path), cache_dir=str(tmp_path / "idx")), batch_size=5,
                                  num_workers=2, shuffle=True, seed=3,
                                  transform=[T.CenterCrop(32)], return_keys=True)
    seen = []
    for images, labels, keys in loader:
        for image, label, key in zip(images, labels.tolist(), keys):
            jpeg, want = expected[key]
            assert label == want
            assert torch.equal(image, torch.from_numpy(decode(jpeg).transpose(2, 0, 1).copy()))
            seen.append(key)
    assert sorted(seen) == sorted(expected) and loader.stats.damaged_shards == []
    loader.close()


def test_read_is_the_encoded_image_and_format_for_another_extension(tmp_path):
    path = write(tmp_path / "data.bin", [imagenet(s, s) for s in range(4)])
    with pytest.raises(DatasetError, match="format="):
        resolve(path)
    assert resolve(path, "tfrecord") == [("tfrecord", path)]
    ds = IndexedDataset(path, format="tfrecord", cache_dir=str(tmp_path / "idx"))
    src = ds.sources[0]
    assert isinstance(src, TFRecordSource) and ds.num_samples == 4
    assert src.read(2) == small_jpeg(2) and bytes(src.view(3)) == small_jpeg(3)
    assert src.table.keys == [f"{i:08d}" for i in range(4)] and src.table.labels == [0, 1, 2, 3]
    assert src.member_exts(0) == ("",) and src.io_stats() == {"read_mode": "pread"}


def test_feature_names_from_format_options(tmp_path):
    records = [{"jpeg": small_jpeg(s), "y": f"class{s % 2}".encode(), "name": f"img_{s}.jpg".encode()}
               for s in range(3)]
    path = write(tmp_path / "custom.tfrecord", records)
    options = {"images": "jpeg", "labels": "y", "keys": "name"}
    src = TFRecordSource(path, options, cache_dir=str(tmp_path / "idx"))
    assert src.table.keys == ["img_0.jpg", "img_1.jpg", "img_2.jpg"]
    assert src.table.labels == ["class0", "class1", "class0"] and src.read(1) == small_jpeg(1)
    ds = IndexedDataset(path, format_options=options, cache_dir=str(tmp_path / "idx"))
    assert ds.class_names == ["class0", "class1"] and ds.labels.tolist() == [0, 1, 0]
    unlabelled = TFRecordSource(path, {"images": "jpeg", "labels": None}, cache_dir=str(tmp_path / "idx"))
    assert unlabelled.table.labels == [None] * 3 and unlabelled.table.keys == ["00000000", "00000001", "00000002"]
    with pytest.raises(DatasetError, match="no record has a feature 'target'.*'jpeg'"):
        TFRecordSource(path, {"images": "jpeg", "labels": "target"}, cache_dir=str(tmp_path / "idx"))
    with pytest.raises(ValueError, match="unknown format_options"):
        TFRecordSource(path, {"image": "jpeg"})


def test_a_cut_file_keeps_the_records_before_the_cut_and_is_reported(tmp_path, caplog):
    torch = pytest.importorskip("torch")  # noqa: F841
    import turbofeed
    from turbofeed import transforms as T

    path = write(tmp_path / "cut.tfrecord", [imagenet(s, 1) for s in range(5)])
    sizes = [len(frame(example(imagenet(s, 1)))) for s in range(5)]
    with open(path, "r+b") as f:
        f.truncate(sum(sizes[:3]) + 20)  # in the middle of record 3
    src = TFRecordSource(path, cache_dir=str(tmp_path / "idx"))
    assert len(src.table) == 3 and src.damage is not None and src.damage.offset == sum(sizes[:3])
    caplog.set_level(logging.WARNING, logger="turbofeed")
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, cache_dir=str(tmp_path / "idx")), batch_size=2, num_workers=1,
                                  transform=[T.CenterCrop(32)])
    assert sum(len(y) for _, y in loader) == 3 and loader.stats.damaged_shards == [path]
    assert any(path in r.getMessage() and "record 3" in r.getMessage() for r in caplog.records)
    loader.close()
    with pytest.raises(DatasetError, match="truncated or corrupt at byte offset"):
        turbofeed.DataLoader(turbofeed.Dataset(path, cache_dir=str(tmp_path / "idx")), batch_size=2, on_error="raise")
    with open(path, "r+b") as f:
        f.truncate(sum(sizes[:2]) + 5)  # a header cut short
    assert len(TFRecordSource(path, cache_dir=str(tmp_path / "idx")).table) == 2


def test_a_corrupt_length_checksum_is_reported(tmp_path):
    path = write(tmp_path / "bad.tfrecord", [imagenet(s, 1) for s in range(4)])
    first = len(frame(example(imagenet(0, 1))))
    data = bytearray(open(path, "rb").read())
    data[first + 8] ^= 0xFF  # record 1's length CRC
    open(path, "wb").write(bytes(data))
    src = TFRecordSource(path, cache_dir=str(tmp_path / "idx"))
    assert len(src.table) == 1 and "length checksum" in src.damage.reason
    ds = IndexedDataset(path, cache_dir=str(tmp_path / "idx"))
    assert ds.damaged == [path] and ds.num_samples == 1
    with pytest.raises(DatasetError, match="record 1: length checksum mismatch"):
        IndexedDataset(path, on_damage="raise", cache_dir=str(tmp_path / "idx"))


def test_empty_file_is_reported(tmp_path):
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(b"")
    src = TFRecordSource(str(path), cache_dir=str(tmp_path / "idx"))
    assert len(src.table) == 0 and "empty" in src.damage.reason


def test_the_index_is_cached_and_rebuilt_when_the_file_is_rewritten(tmp_path, monkeypatch):
    builds = []
    build = tfrecord._build_index
    monkeypatch.setattr(tfrecord, "_build_index", lambda *a: builds.append(a) or build(*a))
    path = write(tmp_path / "x.tfrecord", [imagenet(s, s) for s in range(3)])
    cache = str(tmp_path / "idx")
    first = TFRecordSource(path, cache_dir=cache)
    assert len(builds) == 1 and os.listdir(os.path.join(cache, "tfrecord-index"))
    again = TFRecordSource(path, cache_dir=cache)
    assert len(builds) == 1 and again.table.keys == first.table.keys and not again.changed()
    TFRecordSource(path, {"labels": None}, cache_dir=cache)  # other feature names: another index
    assert len(builds) == 2
    write(tmp_path / "x.tfrecord", [imagenet(s, 9) for s in range(10, 15)])  # rewritten in place
    assert first.changed()
    new = TFRecordSource(path, cache_dir=cache)
    assert len(builds) == 3 and len(new.table) == 5 and new.table.labels == [9] * 5
    assert new.read(4) == small_jpeg(14)


def test_a_record_without_the_image_is_a_problem(tmp_path):
    records = [imagenet(0, 0), {"image/class/label": 1}, imagenet(2, 2),
               {"image/encoded": 5, "image/filename": b"weird.jpg"}]
    path = write(tmp_path / "p.tfrecord", records)
    with open(path, "ab") as f:
        f.write(frame(b"\x0a\xff"))  # framed correctly, not an Example
    ds = IndexedDataset(path, cache_dir=str(tmp_path / "idx"))
    assert ds.num_samples == 2 and ds.damaged == []
    problems = {key: why for _, key, why in ds.problems}
    assert "no image feature 'image/encoded'" in problems["00000001"]
    assert "non-bytes (int64) image feature" in problems["weird.jpg"]
    assert "not a tf.train.Example" in problems["00000004"]
    assert ds.sources[0].read(1) == small_jpeg(2)


def _label_byte(label: int, flipped: int) -> int:
    """Where the serialized Example of label ``label`` and the one of ``flipped`` differ
    (a single byte: both labels are one-byte varints)."""
    a, b = example(imagenet(1, label)), example(imagenet(1, flipped))
    (at,) = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return at


def test_a_flipped_bit_in_a_record_is_a_bad_sample_naming_file_and_record(tmp_path):
    """Label 3 with one bit flipped reads as 7: the data CRC catches it, and the record is
    a bad sample (the length CRC and every other record are intact)."""
    pytest.importorskip("torch")
    import turbofeed
    from turbofeed import transforms as T
    from turbofeed.errors import SampleError

    path = write(tmp_path / "flip.tfrecord", [imagenet(0, 1), imagenet(1, 3), imagenet(2, 2)])
    at = len(frame(example(imagenet(0, 1)))) + 12 + _label_byte(3, 7)
    data = bytearray(open(path, "rb").read())
    assert data[at] == 3
    data[at] ^= 0x04  # 3 -> 7
    open(path, "wb").write(bytes(data))
    cache = str(tmp_path / "idx")
    src = TFRecordSource(path, cache_dir=cache)
    assert len(src.table) == 3 and src.damage is None and src.table.labels[1] != 7
    with pytest.raises(ValueError, match="record 1 .*fails its data checksum"):
        src.read(1)
    with pytest.raises(SampleError, match=f"{path}/00000001: record 1 .*fails its data checksum"):
        for _ in turbofeed.DataLoader(turbofeed.Dataset(path, cache_dir=cache), batch_size=3, num_workers=1,
                                      on_error="raise",
                                      transform=[T.CenterCrop(32)]):
            pass
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, cache_dir=cache), batch_size=3, num_workers=1,
                                  on_error="skip",
                                  transform=[T.CenterCrop(32)])
    labels = [y for _, batch in loader for y in batch.tolist()]
    assert labels == [1, 2] and loader.stats.skipped == 1
    loader.close()


def test_damage_after_indexing_is_caught_when_the_record_is_read(tmp_path, monkeypatch):
    """A bit flipped in the image bytes of a mapped file after it was indexed and mapped:
    no file identity check sees a mapped read, the record's CRC does. (With the default
    ``pread`` a write in place changes the file's ctime: a StorageError; the CRC is what
    catches bit rot that leaves the file's identity alone.)"""
    monkeypatch.setenv("TURBOFEED_MMAP", "1")
    path = write(tmp_path / "rot.tfrecord", [imagenet(s, s) for s in range(3)])
    src = TFRecordSource(path, cache_dir=str(tmp_path / "idx"))
    assert src.read(2) == small_jpeg(2) and bytes(src.view(2)) == small_jpeg(2)  # the file is open now
    at = int(src.table.offsets[2]) + int(src.table.sizes[2]) // 2
    with open(path, "r+b") as f:  # in place: the mapping shows the new bytes
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))
    for read in (src.read, src.view):
        with pytest.raises(ValueError, match="record 2 .*fails its data checksum"):
            read(2)
    assert src.read(1) == small_jpeg(1)
