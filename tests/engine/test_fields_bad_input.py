"""Fields are never dropped silently (issue 24, item 4): samples without an image, an image
under another member name, members of any size, a paired field of another size and an
out-of-range label are delivered or are bad samples naming shard, key and field, on real
tar shards written here."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

import turbofeed
from builders import encode, small_jpeg, write_tar
from turbofeed import transforms as T
from turbofeed.decode import decode
from turbofeed.errors import SampleError


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def _png(values: np.ndarray) -> bytes:
    return encode(Image.fromarray(values), "PNG")


def _embedding(i: int) -> np.ndarray:
    return np.arange(8, dtype=np.float32) + i


def test_fields_without_an_image_field_text_and_embeddings(tmp_path):
    """A text/embedding dataset: no member is an image, every sample is delivered."""
    members = []
    for i in range(6):
        members += [(f"k{i:03d}.txt", f"caption {i}".encode()), (f"k{i:03d}.npy", _npy(_embedding(i)))]
    path = write_tar(str(tmp_path / "text.tar"), members)
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, fields={"caption": "txt", "emb": "npy"}, cache_dir=str(tmp_path / "c")),
                                  batch_size=4, num_workers=2, on_error="raise")
    seen = {}
    for batch in loader:
        assert "image" not in batch
        for key, text, emb in zip(batch["__key__"], batch["caption"], batch["emb"]):
            seen[key] = (text, emb.numpy())
    assert sorted(seen) == [f"k{i:03d}" for i in range(6)]
    for i in range(6):
        text, emb = seen[f"k{i:03d}"]
        assert text == f"caption {i}" and np.array_equal(emb, _embedding(i))
    assert sum(loader.stats.errors.values()) == 0
    pipe = turbofeed.Pipeline(turbofeed.Dataset(path, fields={"caption": "txt"}, cache_dir=str(tmp_path / "c")),
                              num_workers=1, on_error="raise")
    assert sorted(s["caption"] for s in pipe) == [f"caption {i}" for i in range(6)]


def test_the_image_field_may_be_any_member_name_or_list(tmp_path):
    """WebDataset key 000001 with member 000001.rgb.jpg (or .rgb.png): the image field names it."""
    members, expected = [], {}
    for i in range(6):
        key = f"{i:06d}"
        if i % 3 == 2:
            image = _png(np.full((32, 32, 3), 40 * i, np.uint8))
            members.append((f"{key}.rgb.png", image))
        else:
            image = small_jpeg(i)
            members.append((f"{key}.rgb.jpg", image))
        members += [(f"{key}.depth.png", _png(np.full((32, 32), i, np.uint8))), (f"{key}.txt", f"t{i}".encode())]
        expected[key] = decode(image)
    path = write_tar(str(tmp_path / "rgbd.tar"), members)
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, fields={"image": "rgb.jpg;rgb.png", "caption": "txt"}, cache_dir=str(tmp_path / "c")),
                                  batch_size=3, num_workers=2, on_error="raise", shuffle=True, seed=1,
                                  transform=[T.CenterCrop(32)])
    seen = []
    for batch in loader:
        for key, image, text in zip(batch["__key__"], batch["image"], batch["caption"]):
            assert torch.equal(image, torch.from_numpy(expected[key].transpose(2, 0, 1).copy()))
            assert text == f"t{int(key)}"
            seen.append(key)
    assert sorted(seen) == sorted(expected)


def test_members_over_64_kib_are_indexed_and_read(tmp_path):
    """Per-sample annotation JSON larger than 64 KiB (as in SA-1B): a field, and a label."""
    members, anns = [], {}
    for i in range(4):
        ann = {"label": i, "annotations": [{"id": j, "segmentation": "x" * 200} for j in range(400)]}
        anns[f"s{i}"] = ann
        members += [(f"s{i}.jpg", small_jpeg(i)), (f"s{i}.json", json.dumps(ann).encode())]
    assert all(len(json.dumps(a)) > 64 * 1024 for a in anns.values())
    path = write_tar(str(tmp_path / "sa.tar"), members)
    cache = str(tmp_path / "c")
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, fields={"image": "jpg", "ann": "json"}, cache_dir=cache),
                                  batch_size=2, num_workers=2, on_error="raise", transform=[T.CenterCrop(32)])
    got = {k: a for batch in loader for k, a in zip(batch["__key__"], batch["ann"])}
    assert got == anns
    classic = turbofeed.DataLoader(turbofeed.Dataset(path, cache_dir=cache), batch_size=4, num_workers=1,
                                   on_error="raise", return_keys=True,
                                   transform=[T.CenterCrop(32)])
    labels = {k: int(y) for _, ys, ks in classic for k, y in zip(ks, ys)}
    assert labels == {f"sa.tar/s{i}": i for i in range(4)}  # read from the shard when the loader opens


@pytest.mark.parametrize("on_error", ["raise", "skip", "replace"])
def test_a_missing_image_field_is_a_bad_sample_naming_shard_key_and_field(tmp_path, on_error):
    members = []
    for i in range(6):
        if i != 3:  # k3 has its caption but no image
            members.append((f"k{i}.jpg", small_jpeg(i)))
        members.append((f"k{i}.txt", f"t{i}".encode()))
    path = write_tar(str(tmp_path / "gap.tar"), members)
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, fields={"image": "jpg", "caption": "txt"}, cache_dir=str(tmp_path / "c")),
                                  batch_size=3, num_workers=1, on_error=on_error, transform=[T.CenterCrop(32)])
    if on_error == "raise":
        with pytest.raises(SampleError, match=r"fetch: .*gap\.tar/k3: no jpg member for field 'image' \(the sample "
                                              r"has txt\)"):
            list(loader)
        return
    keys = [k for batch in loader for k in batch["__key__"]]
    assert "k3" not in keys and loader.stats.errors["fetch"] == 1
    assert len(keys) == (6 if on_error == "replace" else 5)


def test_a_sample_without_an_image_is_a_bad_sample_of_a_loader_of_labels(tmp_path):
    members = [m for i in range(4) for m in ((f"k{i}.jpg", small_jpeg(i)), (f"k{i}.cls", str(i).encode()))]
    members.append(("k9.cls", b"9"))  # a label without its image
    path = write_tar(str(tmp_path / "lost.tar"), members)
    with pytest.raises(SampleError, match=r"fetch: .*lost\.tar/k9: no image member \(has cls\)"):
        list(turbofeed.DataLoader(turbofeed.Dataset(path, cache_dir=str(tmp_path / "c")), batch_size=5, num_workers=1,
                                  on_error="raise",
                                  transform=[T.CenterCrop(32)]))
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, cache_dir=str(tmp_path / "c")), batch_size=5, num_workers=1,
                                  on_error="skip",
                                  transform=[T.CenterCrop(32)])
    assert [int(y) for _, ys in loader for y in ys] == [0, 1, 2, 3] and loader.stats.skipped == 1


def test_a_paired_field_of_another_size_is_a_bad_sample_saying_both_sizes(tmp_path):
    members = []
    for i in range(4):
        size = (16, 24) if i == 1 else (32, 32)  # k1's mask is 24x16, its image 32x32
        members += [(f"k{i}.jpg", small_jpeg(i)), (f"k{i}.seg.png", _png(np.full(size, i, np.uint8)))]
    path = write_tar(str(tmp_path / "seg.tar"), members)
    kw = dict(batch_size=4, num_workers=1, paired=["mask"], transform=T.Compose([T.RandomResizedCrop(16)]))
    data = turbofeed.Dataset(path, fields={"image": "jpg", "mask": "seg.png"}, cache_dir=str(tmp_path / "c"))
    with pytest.raises(SampleError, match=r"seg\.tar/k1: field 'mask' is 24x16 but the image is 32x32"):
        list(turbofeed.DataLoader(data, on_error="raise", **kw))
    loader = turbofeed.DataLoader(data, on_error="skip", **kw)
    batches = list(loader)
    assert [k for b in batches for k in b["__key__"]] == ["k0", "k2", "k3"]
    assert loader.stats.skipped == 1


def test_a_label_outside_int64_is_a_bad_sample_naming_shard_and_key(tmp_path):
    members = [m for i in range(4) for m in ((f"k{i}.jpg", small_jpeg(i)), (f"k{i}.cls", str(i).encode()))]
    members[5] = ("k2.cls", b"99999999999999999999")  # above 2**63 - 1
    path = write_tar(str(tmp_path / "big.tar"), members)
    cache = str(tmp_path / "c")
    kw = dict(batch_size=4, num_workers=1, transform=[T.CenterCrop(32)])
    data = turbofeed.Dataset(path, cache_dir=cache)
    loader = turbofeed.DataLoader(data, on_error="replace", **kw)  # the dataset opens
    labels = [int(y) for _, ys in loader for y in ys]
    assert len(labels) == 4 and sorted(set(labels)) == [0, 1, 3] and loader.stats.errors["fetch"] == 1
    with pytest.raises(SampleError, match=r"big\.tar/k2: bad \.cls label: integer label 99999999999999999999 "
                                          r"is outside the int64 range"):
        list(turbofeed.DataLoader(data, on_error="raise", **kw))
    with pytest.raises(SampleError, match=r"big\.tar/k2: field 'label': cls member is outside the int64 range"):
        list(turbofeed.DataLoader(turbofeed.Dataset(path, fields={"image": "jpg", "label": "cls"}, cache_dir=cache),
                                  on_error="raise", **kw))
