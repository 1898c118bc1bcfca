"""io.local.tar: the index of a WebDataset shard, its cache, labels, and damaged/foreign files.

The reference for every offset and byte is Python's own ``tarfile`` reading the same file.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tarfile

import numpy as np
import pytest
import torch

import turbofeed
from turbofeed.errors import DatasetError, StorageError
from turbofeed.io import IndexedDataset, TarSource, load_index


def _members(path: str) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as tf:
        return [m for m in tf.getmembers() if m.isfile()]


def _payload(path: str, member: tarfile.TarInfo) -> bytes:
    with tarfile.open(path) as tf:
        return tf.extractfile(member.name).read()


def test_index_matches_tarfile(shard_paths, tmp_path):
    """Keys, image offsets/sizes and .cls labels agree with tarfile; reads are byte-exact."""
    for path in shard_paths:
        members = _members(path)
        images = [m for m in members if m.name.endswith(".jpg")]
        labels = {m.name[:-4]: int(_payload(path, m)) for m in members if m.name.endswith(".cls")}
        src = TarSource(path, cache_dir=str(tmp_path))
        assert src.damage is None and src.table.problems == []
        assert src.table.keys == [m.name[:-4] for m in images]
        assert src.table.image_names == [m.name for m in images]
        assert src.table.offsets.tolist() == [m.offset_data for m in images]
        assert src.table.sizes.tolist() == [m.size for m in images]
        assert src.table.labels == [labels[k] for k in src.table.keys]
        for i in (0, len(images) // 2, len(images) - 1):
            assert src.read(i) == _payload(path, images[i])
        src.close()


def test_a_tar_source_indexes_in_memory_and_writes_nothing(shard_paths, tmp_path):
    """A source opened on its own (index=False, or a shard changed during a pass) reads
    the headers again each time: the per-shard index files are gone."""
    shard = str(tmp_path / "s.tar")
    shutil.copy(shard_paths[0], shard)
    cache = str(tmp_path / "cache")
    first = load_index(shard, cache)
    src = TarSource(shard, cache_dir=cache)
    assert list(src.table.keys) == [row[0] for row in first["rows"]]
    src.close()
    assert not os.path.exists(cache) and os.listdir(tmp_path) == ["s.tar"]


def test_keys_with_directory_prefixes_group_like_webdataset(tmp_path, tar_writer, odd_images):
    """``dir/name.EXT`` members group by ``dir/name``; extensions are case-insensitive and
    the first dot splits key from extension."""
    jpg, png = odd_images["rgb"], odd_images["png_rgba"]
    path = tar_writer(str(tmp_path / "in.tar"), [
        ("n01440764/n01440764_10026.JPEG", jpg), ("n01440764/n01440764_10026.cls", b"0"),
        ("n01443537/n01443537_7.seg.png", png), ("n01443537/n01443537_7.png", png),
        ("n01443537/n01443537_7.cls", b"1"),
    ])
    src = TarSource(path, cache_dir=str(tmp_path))
    assert src.table.keys == ["n01440764/n01440764_10026", "n01443537/n01443537_7"]
    assert src.table.image_names == ["n01440764/n01440764_10026.JPEG", "n01443537/n01443537_7.png"]
    assert src.table.labels == [0, 1]
    assert src.read(0) == jpg and src.read(1) == png


def test_txt_class_names_and_json_labels_through_dataset(tmp_path, tar_writer, odd_images):
    """Class names (JSON strings; .txt ones only with classes=, else a .txt text is a
    caption: -1) become ids in sorted name order; integer labels (.cls, .txt, JSON int or
    {"label": ...}) stay as they are; no label gives -1."""
    jpg = odd_images["rgb"]
    names = tar_writer(str(tmp_path / "names.tar"), [
        ("a.jpg", jpg), ("a.txt", b"dog\n"), ("b.jpg", jpg), ("b.txt", b"cat"),
        ("c.jpg", jpg), ("c.json", b'{"label": "emu"}'), ("d.jpg", jpg), ("d.json", b'"cat"'),
    ])
    ds = IndexedDataset(names)
    assert ds.class_names == ["cat", "emu"]
    assert ds.labels.tolist() == [-1, -1, 1, 0]
    ds = IndexedDataset(names, classes=["cat", "dog", "emu"])
    assert ds.labels.tolist() == [1, 0, 2, 0]
    ints = tar_writer(str(tmp_path / "ints.tar"), [
        ("a.jpg", jpg), ("a.cls", b"7"), ("b.jpg", jpg), ("b.txt", b" 9\n"), ("c.jpg", jpg),
        ("c.json", b"3"), ("d.jpg", jpg), ("d.json", b'{"label": 5, "bbox": [1, 2]}'),
        ("e.jpg", jpg),
    ])
    ds = IndexedDataset(ints)
    assert ds.class_names is None and ds.labels.dtype == np.int64
    assert ds.labels.tolist() == [7, 9, 3, 5, -1]


def test_samples_without_image_or_with_bad_labels_are_bad_samples(tmp_path, tar_writer, odd_images):
    jpg = odd_images["rgb"]
    path = tar_writer(str(tmp_path / "bad.tar"), [
        ("ok.jpg", jpg), ("ok.cls", b"1"),
        ("noimg.cls", b"2"), ("noimg.json", b"{}"),
        ("badcls.jpg", jpg), ("badcls.cls", b"abc"),
        ("emptycls.jpg", jpg), ("emptycls.cls", b""),
        ("badjson.jpg", jpg), ("badjson.json", b"{not json"),
        ("nofield.jpg", jpg), ("nofield.json", b'{"caption": "a cat"}'),
        ("floatjson.jpg", jpg), ("floatjson.json", b"1.5"),
    ])
    src = TarSource(path, cache_dir=str(tmp_path))
    # every key keeps its place; JSON metadata without a label field (img2dataset/LAION)
    # is an unlabelled sample, the others are bad samples for a loader of labels
    keys = ["ok", "noimg", "badcls", "emptycls", "badjson", "nofield", "floatjson"]
    assert src.table.keys == keys and src.table.problems == []
    assert src.table.labels == [1, None, None, None, None, None, None]
    bad = {keys[row]: why for row, why in src.table.bad.items()}
    assert set(bad) == {"noimg", "badcls", "emptycls", "badjson", "floatjson"}
    assert "no image member (has cls, json)" in bad["noimg"] and ".cls" in bad["badcls"]
    ds = IndexedDataset(path)
    assert ds.bad == {1: bad["noimg"], 2: bad["badcls"], 3: bad["emptycls"], 4: bad["badjson"], 6: bad["floatjson"]}
    assert ds.describe(1) == (path, "noimg")  # the dataset names the shard too
    fields = TarSource(path, cache_dir=str(tmp_path), labels=False)  # a loader of fields: no label parsed
    assert fields.table.keys == keys and fields.table.bad == {}


def test_non_tar_files_are_reported_with_their_path(tmp_path, shard_paths):
    """Not a tar at all: reported as damaged (empty source), raised under "raise"."""
    text = tmp_path / "notes.tar"
    text.write_bytes(b"these are not tar headers\n" * 40)
    with pytest.raises(DatasetError, match="not a tar") as info:
        TarSource(str(text), cache_dir=str(tmp_path), on_damage="raise")
    assert str(text) in str(info.value)
    src = TarSource(str(text), cache_dir=str(tmp_path))
    assert len(src.table) == 0 and "not a tar" in src.damage.reason


def test_missing_shard_is_named(tmp_path):
    missing = str(tmp_path / "shard-000007.tar")
    with pytest.raises(DatasetError, match="shard-000007.tar"):
        IndexedDataset(missing)


def _cut_copy(src: str, dst: str, size: int) -> str:
    with open(src, "rb") as f:
        data = f.read(size)
    with open(dst, "wb") as f:
        f.write(data)
    return dst


def _keys_before(members: list[tarfile.TarInfo], stop: int) -> list[str]:
    """Keys of the samples whose image and label both lie in ``members[:stop]``."""
    names = [m.name for m in members[:stop]]
    return [n[:-4] for n in names if n.endswith(".jpg") and n[:-4] + ".cls" in names]


@pytest.mark.parametrize("victim_index", [20, 21])  # the image, then the label of one sample
def test_truncated_mid_member(shard_paths, tmp_path, victim_index):
    """"raise" names the file and the byte offset of the cut member's header; "skip" keeps
    the samples before it, readable byte for byte, and drops the sample the cut goes
    through whole (a kept image without its label would train as label -1)."""
    members = _members(shard_paths[0])
    victim = members[victim_index]
    cut = victim.offset_data + victim.size // 2
    path = _cut_copy(shard_paths[0], str(tmp_path / "cut.tar"), cut)
    with pytest.raises(DatasetError) as info:
        TarSource(path, on_damage="raise", cache_dir=str(tmp_path))
    assert path in str(info.value) and f"byte offset {victim.offset}" in str(info.value)
    src = TarSource(path, on_damage="skip", cache_dir=str(tmp_path))
    assert src.damage.offset == victim.offset
    assert src.table.keys == _keys_before(members, victim_index) == [f"{i:08d}" for i in range(10)]
    assert None not in src.table.labels
    by_name = {m.name: m for m in members}
    for i, key in enumerate(src.table.keys):
        assert src.read(i) == _payload(shard_paths[0], by_name[key + ".jpg"])
    assert IndexedDataset(path).damaged == [path]


@pytest.mark.parametrize("damage", ["cut_in_header", "bad_checksum"])
def test_damaged_header_is_not_mistaken_for_the_end(shard_paths, tmp_path, damage):
    """tarfile stops quietly at a cut or corrupt header; turbofeed reports it as damage at
    that header's offset instead of silently dropping the rest of the shard. The sample
    just before may have lost members behind the bad header, so "skip" drops it too."""
    members = _members(shard_paths[0])
    victim = members[11]  # the label header of the sixth sample
    with open(shard_paths[0], "rb") as f:
        data = bytearray(f.read())
    if damage == "cut_in_header":
        data = data[:victim.offset + 100]
    else:
        data[victim.offset + 148:victim.offset + 156] = b"garbage!"  # the checksum field
    path = str(tmp_path / f"{damage}.tar")
    with open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(DatasetError, match=f"byte offset {victim.offset}") as info:
        TarSource(path, on_damage="raise", cache_dir=str(tmp_path))
    assert path in str(info.value)
    src = TarSource(path, on_damage="skip", cache_dir=str(tmp_path))
    assert src.table.keys == _keys_before(members, 10) == [f"{i:08d}" for i in range(5)]


def test_intact_tars_report_no_damage_and_a_cut_between_members_is_reported(
        shard_paths, tmp_path, tar_writer, odd_images):
    """A normal tar is not damaged; one cut exactly after a member (no end marker: the
    samples after it are lost without a trace in the file) keeps its members and is reported."""
    members = _members(shard_paths[1])
    boundary = members[4].offset  # start of the 5th member's header: 2 whole samples before
    path = _cut_copy(shard_paths[1], str(tmp_path / "boundary.tar"), boundary)
    src = TarSource(path, cache_dir=str(tmp_path))
    assert "no end-of-archive marker" in src.damage.reason and len(src.table) == 2
    with pytest.raises(DatasetError, match="no end-of-archive marker"):
        TarSource(path, on_damage="raise", cache_dir=str(tmp_path))
    small = tar_writer(str(tmp_path / "one.tar"), [("x.jpg", odd_images["rgb"])])
    assert TarSource(small, on_damage="raise", cache_dir=str(tmp_path)).damage is None


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_shard_files_read_exact_bytes_keep_at_most_max_open_and_close_evicted(tmp_path):
    """Positional reads and views through a cache of 2 over 5 files: every read is
    byte-exact, at most 2 files and 2 maps stay open, a file in use outlives its eviction."""
    from turbofeed.io.local.files import ShardFiles

    files = []
    for i in range(5):
        path = tmp_path / f"f{i}.bin"
        path.write_bytes(bytes((i * 7 + j) % 256 for j in range(4096)))
        files.append(str(path))
    before = _open_fds()
    cache = ShardFiles(max_open=2)
    first_view = cache.view(files[0], 8, 0)  # kept while its map is evicted below
    for round_ in range(3):
        for i, path in enumerate(files):
            want = bytes((i * 7 + j) % 256 for j in range(1000 + round_, 1100 + round_))
            assert cache.pread(path, 100, 1000 + round_) == want
            assert bytes(cache.view(path, 100, 1000 + round_)) == want
            # 2 files, 2 maps (Python's mmap keeps a dup), and the map first_view holds
            assert _open_fds() - before <= 5
    held = cache._files[files[-1]]  # what a reader inside pread holds
    cache.close()
    assert os.pread(held.fd, 4, 0) == bytes(range(28, 32))  # still open for that reader
    assert bytes(first_view) == bytes(range(8))  # a view of an evicted map stays valid
    del held, first_view
    assert _open_fds() == before
    with pytest.raises(StorageError, match="past the end of the 4096-byte file"):
        cache.view(files[0], 100, 4000)


def test_loader_batches_are_the_same_with_and_without_mapped_shards(shards, monkeypatch):
    import turbofeed
    from turbofeed import transforms as T

    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=1, transform=T.imagenet_train(48), return_keys=True)
    copied = [(x.clone(), y.clone(), k) for x, y, k in turbofeed.DataLoader(shards, **kw)]  # the default
    monkeypatch.setenv("TURBOFEED_MMAP", "1")
    mapped = [(x.clone(), y.clone(), k) for x, y, k in turbofeed.DataLoader(shards, **kw)]
    assert len(mapped) == len(copied) > 1
    for (a, la, ka), (b, lb, kb) in zip(mapped, copied):
        assert ka == kb and torch.equal(la, lb) and torch.equal(a, b)


def test_a_shard_cut_short_during_a_pass_is_a_storage_error_then_reindexed(tmp_path, shard_paths):
    """Cut in the middle of a pass (default plain reads): not bad data, so not skipped even
    under on_error="skip": the pass stops with a StorageError naming the shard; the next
    pass starts by re-indexing the shard and uses exactly the samples still there."""
    import turbofeed
    from turbofeed import transforms as T

    path = str(tmp_path / "cut.tar")
    shutil.copy(shard_paths[0], path)
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, cache_dir=str(tmp_path / "idx")), batch_size=4, num_workers=1,
                                  transform=T.imagenet_eval(32), on_error="skip", prefetch=1)
    total = loader.num_samples
    it = iter(loader)
    seen = len(next(it)[1])
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(turbofeed.StorageError, match="cut.tar: truncated from"):
        for _, y in it:
            seen += len(y)
    assert 0 < seen < total and not loader.stats.errors
    again = sum(len(y) for _, y in loader)
    assert again == loader.num_samples < total and loader.stats.damaged_shards == [path]
    assert not loader.stats.errors