"""16-bit images become 8-bit by their high byte (as OpenCV and torchvision do), not
clipped to white; animated images (GIF, WebP, APNG) give their first frame."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from image_cases import animated_gif, grey16_png, grey16_tiff
from turbofeed.decode import decode, decode_pillow

# Every high byte, each with several low bytes: 0x0000, 0x00ff, 0x0100, ..., 0xffff.
VALUES = (np.arange(256, dtype=np.uint32)[:, None] * 256 + np.array([0, 1, 0x7F, 0xFF])).astype(np.uint16)


@pytest.mark.parametrize("write", [grey16_png, grey16_tiff], ids=["png", "tiff"])
def test_sixteen_bit_grey_keeps_the_high_byte(write):
    data = write(VALUES)
    assert Image.open(io.BytesIO(data)).mode.startswith("I;16")  # the case is what it claims
    pixels = decode(data)
    assert pixels.dtype == np.uint8 and pixels.shape == (*VALUES.shape, 3)
    for c in range(3):
        assert np.array_equal(pixels[:, :, c], (VALUES >> 8).astype(np.uint8))
    assert np.array_equal(decode_pillow(data), pixels)


def test_sixteen_bit_mid_grey_is_not_white():
    pixels = decode(grey16_png(np.full((8, 8), 0x8000, np.uint16)))
    assert (pixels == 0x80).all()


@pytest.mark.parametrize("fmt", ["GIF", "WEBP", "PNG"], ids=["gif", "webp", "apng"])
def test_animated_images_give_their_first_frame(fmt):
    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
    if fmt == "GIF":
        data = animated_gif(colours)
    else:
        frames = [Image.new("RGB", (40, 30), c) for c in colours]
        buf = io.BytesIO()
        frames[0].save(buf, fmt, save_all=True, append_images=frames[1:], duration=50, loop=0,
                       **({"lossless": True} if fmt == "WEBP" else {}))
        data = buf.getvalue()
    with Image.open(io.BytesIO(data)) as im:
        assert getattr(im, "n_frames", 1) == 3  # really animated
    pixels = decode(data)
    assert pixels.shape == (30, 40, 3)
    assert np.abs(pixels.astype(int) - colours[0]).max() <= 2
