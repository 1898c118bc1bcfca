"""decode: every supported image comes out HWC uint8 RGB and agrees with Pillow's decode of
the same bytes; rubbish raises ValueError with a reason and does not poison the decoder;
probe() reads the size from the header alone."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from PIL import Image

from turbofeed.decode import decode, probe

# Max abs difference from Pillow, measured on the odd_images fixture: libjpeg-turbo and
# Pillow share the JPEG decoder and agree exactly, except for CMYK -> RGB, where the two
# conversions round differently by exactly one level (measured max 1, mean 1.0).
TOLERANCE = {"rgb": 0, "gray": 0, "cmyk": 1, "progressive": 0, "png_rgba": 0, "png_palette": 0}


def _pillow(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("kind", sorted(TOLERANCE))
def test_odd_images_decode_to_rgb_like_pillow(odd_images, kind):
    out = decode(odd_images[kind])
    assert out.dtype == np.uint8 and out.shape == (96, 128, 3)
    diff = np.abs(out.astype(np.int16) - _pillow(odd_images[kind]))
    assert diff.max() <= TOLERANCE[kind]
    if kind == "gray":
        assert np.array_equal(out[..., 0], out[..., 1]) and np.array_equal(out[..., 1], out[..., 2])


def _shard_jpegs(shard_path: str, count: int) -> list[bytes]:
    with tarfile.open(shard_path) as tf:
        jpgs = [m for m in tf.getmembers() if m.name.endswith(".jpg")][:count]
        return [tf.extractfile(m).read() for m in jpgs]


def test_imagenet_like_jpegs_match_pillow_exactly(shard_paths):
    """Real-photo 4:2:0 JPEGs of ImageNet size: measured max difference 0 over 120 images."""
    for data in _shard_jpegs(shard_paths[0], 12):
        out = decode(data)
        ref = _pillow(data)
        assert out.shape == ref.shape and out.shape[2] == 3 and min(out.shape[:2]) >= 200
        assert np.array_equal(out, ref)


@pytest.mark.parametrize("kind,reason", [
    ("empty", "empty"), ("truncated", "bad JPEG"), ("garbage", "not a decodable image"),
])
def test_rubbish_raises_with_a_reason_and_the_next_image_still_decodes(odd_images, kind, reason):
    good = decode(odd_images["rgb"])
    with pytest.raises(ValueError, match=reason):
        decode(odd_images[kind])
    assert np.array_equal(decode(odd_images["rgb"]), good)


@pytest.mark.parametrize("cut", [0.25, 0.5, 0.9])
def test_truncated_real_jpeg_and_png_raise(shard_paths, odd_images, cut):
    """A strict decode: a cut stream is an error, not an image with grey rows."""
    data = _shard_jpegs(shard_paths[1], 1)[0]
    with pytest.raises(ValueError):
        decode(data[:int(len(data) * cut)])
    png = odd_images["png_rgba"]
    with pytest.raises(ValueError):
        decode(png[:int(len(png) * cut)])
    assert decode(data).shape == _pillow(data).shape


def test_jpeg_marker_followed_by_rubbish(odd_images):
    with pytest.raises(ValueError, match="bad JPEG"):
        decode(b"\xff\xd8\xff" + odd_images["garbage"])


@pytest.mark.parametrize("kind", sorted(TOLERANCE))
def test_probe_agrees_with_the_decoded_shape(odd_images, kind):
    info = probe(odd_images[kind])
    assert (info.height, info.width) == decode(odd_images[kind]).shape[:2]
    assert info.format == ("png" if kind.startswith("png") else "jpeg")


def test_probe_needs_only_the_header(shard_paths, odd_images):
    """The first quarter of a JPEG or PNG cannot be decoded, but its header gives the size
    of the full image."""
    for data in _shard_jpegs(shard_paths[2], 5):
        head = data[:len(data) // 4]
        with pytest.raises(ValueError):
            decode(head)
        info = probe(head)
        assert (info.height, info.width) == _pillow(data).shape[:2]
    for kind in ("png_rgba", "png_palette"):
        head = odd_images[kind][:len(odd_images[kind]) // 4]
        with pytest.raises(ValueError):
            decode(head)
        assert (probe(head).height, probe(head).width) == (96, 128)


@pytest.mark.parametrize("kind", ["empty", "garbage"])
def test_probe_refuses_rubbish(odd_images, kind):
    with pytest.raises(ValueError):
        probe(odd_images[kind])
