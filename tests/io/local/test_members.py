"""io: every member of a WebDataset sample is indexed and read back byte-exact (issue 16
groundwork): LAION-style and segmentation shards, missing members, the compact member
arrays, the index version, the field-spec pick, and the image-only default of other
sources. What the loaders deliver does not change."""

from __future__ import annotations

import json
import os
import shutil
import tarfile

import numpy as np
import pytest
from builders import encode, photo, small_jpeg, write_tar

from turbofeed.io import IndexedDataset, FolderSource, TarSource, pick_member, split_key
from turbofeed.errors import StorageError


def _reference(path: str) -> dict[str, dict[str, tarfile.TarInfo]]:
    """Members by key and extension, as Python's tarfile reads the shard."""
    out: dict[str, dict[str, tarfile.TarInfo]] = {}
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            key, ext = split_key(m.name)
            out.setdefault(key, {})[ext] = m
    return out


def test_laion_shard_gives_every_member_by_key(laion_shards, tmp_path):
    """.jpg (or .png), .txt caption and .json metadata: exact bytes by key, in storage
    order, offsets as tarfile has them; a missing .json or any other extension is None."""
    (path, _), by_key = laion_shards
    src = TarSource(path, cache_dir=str(tmp_path / "cache"))
    ref = _reference(path)
    assert src.table.has_members and len(src.table) == 6
    assert src.table.member_exts == ("jpg", "txt", "json", "png")
    for i, key in enumerate(src.table.keys):
        assert src.member_exts(i) == tuple(by_key[key])  # storage order
        for ext, payload in by_key[key].items():
            assert src.read_member(i, ext) == payload
            assert src.table.find_member(i, ext) == (ref[key][ext].offset_data, ref[key][ext].size)
        for ext in ("json", "cls", "seg.png", "", "JPG"):
            if ext not in by_key[key]:
                assert src.read_member(i, ext) is None
    assert src.read_member(3, "json") is None and "json" not in src.member_exts(3)
    assert src.member_exts(5) == ("txt", "jpg", "json")
    src.close()


def test_the_image_fields_and_labels_are_unchanged(laion_shards, tmp_path):
    """The image columns still name the preferred image member; read() is that member."""
    (path, _), by_key = laion_shards
    src = TarSource(path, cache_dir=str(tmp_path / "cache"))
    ref = _reference(path)
    for i, key in enumerate(src.table.keys):
        image = "png" if "png" in by_key[key] else "jpg"
        assert src.table.image_names[i] == f"{key}.{image}"
        assert (int(src.table.offsets[i]), int(src.table.sizes[i])) == \
            (ref[key][image].offset_data, ref[key][image].size)
        assert src.read(i) == src.read_member(i, image) == by_key[key][image]
        assert src.table.labels[i] == by_key[key]["txt"].decode()  # the .txt, as before
    src.close()


def test_dataset_routes_members_by_global_id(laion_shards, tmp_path):
    paths, by_key = laion_shards
    ds = IndexedDataset(paths, cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 12
    for gid in range(len(ds)):
        _, key = ds.describe(gid)
        assert ds.member_exts(gid) == tuple(by_key[key])
        assert ds.read_member(gid, "txt") == by_key[key]["txt"]
        assert ds.read_member(gid, "json") == by_key[key].get("json")
        image = pick_member(ds.member_exts(gid), "jpg;png;webp")
        assert ds.read_member(gid, image) == by_key[key][image] == ds.read(gid)
    ds.close()


def test_segmentation_shard(tmp_path):
    """.jpg + .seg.png: the mask is the member "seg.png", not "png"."""
    members = []
    for k in range(4):
        members += [(f"scene/{k:04d}.jpg", small_jpeg(k)),
                    (f"scene/{k:04d}.seg.png", encode(photo(32, 32, seed=k).convert("L"), "PNG"))]
    path = write_tar(str(tmp_path / "seg.tar"), members)
    src = TarSource(path, cache_dir=str(tmp_path / "cache"))
    assert src.table.keys == [f"scene/{k:04d}" for k in range(4)]
    for i in range(4):
        assert src.member_exts(i) == ("jpg", "seg.png")
        assert src.read_member(i, "seg.png") == members[2 * i + 1][1]
        assert src.read_member(i, "jpg") == members[2 * i][1] == src.read(i)
        assert src.read_member(i, "png") is None
        assert pick_member(src.member_exts(i), "png;seg.png") == "seg.png"
    src.close()


def test_member_arrays_are_small_flat_and_consistent(tmp_path):
    """No Python object per sample: 17 bytes per member (uint8 ext id, int64 offset and
    size) and 8 per sample."""
    n = 300
    members = []
    for k in range(n):
        members += [(f"{k:06d}.jpg", b"J" * (k % 7 + 1)), (f"{k:06d}.txt", b"t%d" % k),
                    (f"{k:06d}.json", b"{}")]
    src = TarSource(write_tar(str(tmp_path / "big.tar"), members), cache_dir=str(tmp_path / "cache"))
    t = src.table
    n_members = 3 * n
    assert t.member_start.dtype == np.int64 and t.member_start.shape == (n + 1,)
    assert t.member_ext.dtype == np.uint8 and t.member_ext.shape == (n_members,)
    assert t.member_offset.dtype == t.member_size.dtype == np.int64
    assert t.member_start[0] == 0 and t.member_start[-1] == n_members
    assert (np.diff(t.member_start) == 3).all()
    nbytes = t.member_start.nbytes + t.member_ext.nbytes + t.member_offset.nbytes + t.member_size.nbytes
    assert nbytes == 17 * n_members + 8 * (n + 1)
    assert nbytes < 64 * n_members
    assert src.read_member(n - 1, "txt") == b"t%d" % (n - 1)
    src.close()


def test_many_extensions_widen_the_id_dtype(tmp_path):
    members = [(f"{k:04d}.jpg", b"j") for k in range(3)] + [("0000.x%d" % e, b"%d" % e) for e in range(300)]
    src = TarSource(write_tar(str(tmp_path / "wide.tar"), members), cache_dir=str(tmp_path / "cache"))
    assert len(src.table.member_exts) == 301 and src.table.member_ext.dtype == np.uint16
    assert src.read_member(0, "x299") == b"299" and src.read_member(1, "x299") is None
    src.close()


def test_samples_dropped_while_indexing_take_their_members_along(tmp_path):
    """A bad label and a sample without an image keep their rows (bad samples for a loader
    of labels), a cut sample is dropped; the member rows stay aligned. The last copy of a
    repeated name is read."""
    members = [("a.jpg", b"A"), ("a.cls", b"1"), ("a.txt", b"old"),
               ("b.jpg", b"B"), ("b.cls", b"not an int"),
               ("c.txt", b"no image"),
               ("d.jpg", b"D"), ("d.cls", b"4"), ("d.json", b'{"k": 4}'),
               ("a.txt", b"new")]
    path = write_tar(str(tmp_path / "mixed.tar"), members)
    src = TarSource(path, cache_dir=str(tmp_path / "cache"))
    assert src.table.keys == ["a", "b", "c", "d"] and sorted(src.table.bad) == [1, 2]
    assert src.member_exts(0) == ("jpg", "cls", "txt") and src.read_member(0, "txt") == b"new"
    assert src.member_exts(2) == ("txt",) and src.read_member(2, "txt") == b"no image"
    assert src.member_exts(3) == ("jpg", "cls", "json") and src.read_member(3, "json") == b'{"k": 4}'
    assert src.table.labels == [1, None, None, 4]
    src.close()

    data = open(path, "rb").read()
    cut = str(tmp_path / "cut.tar")
    with open(cut, "wb") as f:  # cut inside d.json: d is dropped whole
        f.write(data[:_reference(path)["d"]["json"].offset_data + 4])
    src = TarSource(cut, cache_dir=str(tmp_path / "cache"))
    assert src.damage is not None and src.table.keys == ["a", "b", "c"]
    assert src.table.has_members and src.read_member(0, "txt") == b"old"
    src.close()


def test_an_unreadable_shard_has_an_empty_member_table(tmp_path):
    path = tmp_path / "s.tar.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 64)
    src = TarSource(str(path), cache_dir=str(tmp_path / "cache"))
    assert len(src.table) == 0 and src.table.has_members
    assert src.table.member_start.tolist() == [0] and src.table.member_exts == ()


def test_a_member_read_from_a_truncated_shard_raises_storage_error(laion_shards, tmp_path):
    (path, _), _ = laion_shards
    copy = str(tmp_path / "cut.tar")
    shutil.copy(path, copy)
    src = TarSource(copy, cache_dir=str(tmp_path / "cache"))
    with open(copy, "r+b") as f:
        f.truncate(600)
    with pytest.raises(StorageError, match="cut.tar: truncated from"):
        src.read_member(0, "json")
    src.close()


def test_sources_without_members_serve_the_image_alone(image_folder):
    """The Source default: the image's own extension reads the image, any other is None."""
    src = FolderSource(image_folder)
    assert not src.table.has_members and src.table.exts_of(0) == ()
    for i in (0, len(src.table) - 1):
        ext = split_key(src.table.image_names[i])[1]
        assert ext and src.member_exts(i) == (ext,) == (src.table.image_ext(i),)
        assert src.read_member(i, ext) == src.read(i)
        assert src.read_member(i, "txt") is None
        assert src.table.find_member(i, ext) is None  # the table itself records none
    src.close()


def test_pick_member_first_listed_match_wins():
    assert pick_member(("png", "jpg", "txt"), "jpg;png;webp") == "jpg"
    assert pick_member(("webp", "txt"), "jpg;png;webp") == "webp"
    assert pick_member(("txt", "json"), "jpg;png;webp") is None
    assert pick_member((), "jpg") is None
    assert pick_member(("jpg", "seg.png"), "seg.png") == "seg.png"
    assert pick_member(("jpg", "seg.png"), "png") is None  # "seg.png" is not "png"
    assert pick_member({"jpg", "png"}, " PNG ; jpg") == "png"  # spaces, case
    assert pick_member(("json", "txt"), ["txt", "json"]) == "txt"  # a sequence of extensions
