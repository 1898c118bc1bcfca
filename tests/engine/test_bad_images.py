"""Images are delivered intact or not at all, through the loaders: a JPEG damaged below
the crop is a bad sample in every epoch and on every decode path; junk before a header
marker is delivered. (Decoder-level cases: tests/decode/test_damage.py.)"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import turbofeed
from builders import encode
from image_cases import cut_scan, junk_before_marker, ones_in_scan, textured
from turbofeed import transforms as T

# 320 x 240 images; a 120 x 120 centre crop reads rows 60..180, and the damage is below
# row 200 (the scan cut at 85% or overwritten at 90% of its bytes).
CENTRE = T.Compose([T.CenterCrop(120)])
DAMAGED_KEYS = {"s001", "s002"}


@pytest.fixture
def damaged_shard(tmp_path, tar_writer):
    """8 samples: s001 cut short (EOI appended), s002 with a bad Huffman code, both below
    the centre crop; s003 with junk before a header marker; the rest intact."""
    members = []
    for i in range(8):
        data = encode(Image.fromarray(textured(seed=i)), quality=90)
        if i == 1:
            data = cut_scan(data, 0.85)
        elif i == 2:
            data = ones_in_scan(data, 0.9)
        elif i == 3:
            data = junk_before_marker(data)
        members += [(f"s{i:03d}.jpg", data), (f"s{i:03d}.cls", str(i).encode())]
    return tar_writer(str(tmp_path / "damaged.tar"), members)


def test_damage_below_the_crop_is_bad_in_every_epoch(damaged_shard):
    loader = turbofeed.DataLoader(damaged_shard, batch_size=3, num_workers=2, transform=CENTRE,
                                  on_error="skip", return_keys=True)
    for epoch in range(2):
        keys = {k.split("/")[1] for _, _, ks in loader for k in ks}
        assert keys == {f"s{i:03d}" for i in range(8)} - DAMAGED_KEYS, epoch
    assert loader.stats.skipped == 4


def test_damage_raises_with_shard_and_key(damaged_shard):
    loader = turbofeed.DataLoader(damaged_shard, batch_size=8, num_workers=1, transform=CENTRE, on_error="raise")
    with pytest.raises(turbofeed.SampleError, match=r"damaged.tar/s001: .*Corrupt JPEG data"):
        list(loader)


def test_junk_before_a_marker_is_delivered_as_intact(damaged_shard, tmp_path, tar_writer):
    clean = encode(Image.fromarray(textured(seed=3)), quality=90)
    clean_path = tar_writer(str(tmp_path / "clean.tar"), [("s003.jpg", clean), ("s003.cls", b"3")])
    loader = turbofeed.DataLoader(damaged_shard, batch_size=8, num_workers=1, transform=CENTRE, on_error="skip")
    images, labels = next(iter(loader))
    reference, _ = next(iter(turbofeed.DataLoader(clean_path, batch_size=1, transform=CENTRE)))
    assert torch.equal(images[labels.tolist().index(3)], reference[0])


class LenientDecoder:
    """Stands in for nvJPEG (no GPU here): decodes on the CPU with Pillow, which like
    nvJPEG turns a damaged scan into pixels without a word; records what reaches it."""

    device = torch.device("cpu")

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def decode(self, datas):
        self.seen += [bytes(d) for d in datas]
        out = []
        for data in datas:
            with Image.open(io.BytesIO(data)) as im:
                out.append(torch.from_numpy(np.asarray(im.convert("RGB")).transpose(2, 0, 1).copy()))
        return out


def test_gpu_path_refuses_damage_before_the_decoder(damaged_shard):
    decoder = LenientDecoder()
    loader = turbofeed.DataLoader(damaged_shard, batch_size=3, num_workers=2, transform=CENTRE,
                                  gpu_decode=decoder, on_error="skip", return_keys=True)
    for epoch in range(2):
        keys = {k.split("/")[1] for _, _, ks in loader for k in ks}
        assert keys == {f"s{i:03d}" for i in range(8)} - DAMAGED_KEYS, epoch
    assert len(decoder.seen) == 12  # 6 intact samples, twice; the damaged ones never reached it


def test_pipeline_refuses_damage(damaged_shard):
    with turbofeed.Pipeline(damaged_shard, num_workers=2, on_error="skip") as pipe:
        keys = {s.key for s in pipe}
    assert keys == {f"s{i:03d}" for i in range(8)} - DAMAGED_KEYS
