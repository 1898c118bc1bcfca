"""Shards written by webdataset's own ``TarWriter``, as its users write them: tarscan and
the index read the members ``tarfile`` reads, and a DataLoader delivers every sample once
with its label and fields. Its default settings stamp each member's float ``time.time()``
in a pax record (tarfile's way to keep the fraction), so those shards go to tarfile; with
a fixed integer ``mtime`` (reproducible shards) the headers are plain ustar and take the
fast walk. A dot in the file-name part of a key is where WebDataset splits the key from
the extension: webdataset's own reader and turbofeed read such shards alike."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import small_jpeg
from PIL import Image
from tar_compare import scan_both, tarfile_members, walked

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import decode_mask
from turbofeed.errors import SampleError
from turbofeed.io.table import split_key

wds = pytest.importorskip("webdataset", reason="pip install webdataset (the test extra)")

CLASSES = ["cat", "dog", "eel"]
# keys as users write them: directories, a dot in a directory's name, a long path
KEYS = [f"train/s{i:04d}" for i in range(6)] + [f"v1.2/part_{i}/img_{i:03d}" for i in range(4)] + \
       ["x" * 60 + "/" + "y" * 60 + "_long"]  # member names over 100 bytes: a pax path record each
SETTINGS = {"default": {}, "reproducible": {"mtime": 1_700_000_000}}


def mask_png(i: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((8, 8), i % 21, np.uint8), mode="L").save(out, format="PNG")
    return out.getvalue()


def sample(i: int, key: str) -> dict:
    """One sample as a user hands it to TarWriter: its encoder turns the int, the dict and
    the str into the member bytes."""
    return {"__key__": key, "jpg": small_jpeg(i), "cls": i % 3, "txt": CLASSES[i % 3],
            "json": {"i": i, "key": key}, "seg.png": mask_png(i)}


def write_shard(path: Path, keys: list[str], first: int = 0, **settings) -> Path:
    """Samples ``first, first + 1, ...`` under ``keys``."""
    with wds.TarWriter(str(path), **settings) as sink:
        for i, key in enumerate(keys, first):
            sink.write(sample(i, key))
    return path


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def shards(request, tmp_path_factory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp(f"wds-{request.param}")
    write_shard(root / "a.tar", KEYS[:6], **SETTINGS[request.param])
    write_shard(root / "b.tar", KEYS[6:], 6, **SETTINGS[request.param])
    return request.param, root


def test_tarwriter_shards_index_as_tarfile_reads_them(shards, monkeypatch):
    setting, root = shards
    for shard, keys in ((root / "a.tar", KEYS[:6]), (root / "b.tar", KEYS[6:])):
        expected = tarfile_members(shard)
        exts = ["cls", "jpg", "json", "seg.png", "txt"]  # TarWriter writes a sample's members sorted
        assert [m[0] for m in expected] == [f"{k}.{e}" for k in keys for e in exts]
        fast, slow = scan_both(shard, monkeypatch)
        assert fast == slow == (expected, None)
        # pax records (every member's mtime by default, the long names' paths in b.tar) go to tarfile
        plain = setting == "reproducible" and shard.name == "a.tar"
        assert (walked(shard) == expected) if plain else (walked(shard) is None)


def test_a_loader_delivers_every_tarwriter_sample_with_its_label_and_fields(shards):
    _, root = shards
    loader = turbofeed.DataLoader(turbofeed.Dataset(str(root), fields={"image": "jpg", "label": "cls", "caption": "txt", "meta": "json",
                                          "mask": "seg.png"}, decoders={"seg.png": decode_mask}), batch_size=4, num_workers=2, shuffle=True, seed=1, transform=T.imagenet_eval(16))
    seen = []
    for batch in loader:
        for j, key in enumerate(batch["__key__"]):
            i = KEYS.index(key)
            assert batch["label"][j].item() == i % 3 and batch["caption"][j] == CLASSES[i % 3]
            assert batch["meta"][j] == {"i": i, "key": key}
            assert torch.equal(batch["mask"][j], torch.full((8, 8), i % 21, dtype=torch.uint8))
            assert batch["image"][j].shape == (3, 16, 16)
            seen.append(key)
    assert sorted(seen) == sorted(KEYS)


def test_the_classic_loader_reads_the_cls_labels(shards):
    _, root = shards
    loader = turbofeed.DataLoader(str(root), batch_size=5, num_workers=2, transform=T.imagenet_eval(16),
                                  return_keys=True)
    got = {key.split("/", 1)[1]: label for images, labels, keys in loader for key, label in
           zip(keys, labels.tolist())}
    assert got == {key: i % 3 for i, key in enumerate(KEYS)}


def test_a_dot_in_a_keys_file_name_splits_as_webdatasets_reader_splits_it(tmp_path):
    from webdataset.tariterators import base_plus_ext

    shard = write_shard(tmp_path / "dots.tar", ["dir/sample.0001", "dir/sample.0002"])
    names = [m[0] for m in tarfile_members(shard)]
    assert [split_key(n) for n in names] == [base_plus_ext(n) for n in names]  # ("dir/sample", "0001.jpg") ...
    # both readers see one sample "dir/sample" with members 0001.jpg, 0002.jpg ...: no jpg field
    loader = turbofeed.DataLoader(turbofeed.Dataset(str(shard), fields={"image": "jpg"}), batch_size=1, num_workers=1,
                                  on_error="raise", transform=T.imagenet_eval(16))
    with pytest.raises(SampleError, match=r"dots\.tar/dir/sample: no jpg member for field 'image' "
                                          r"\(the sample has 0001\.cls, 0001\.jpg"):
        list(loader)
