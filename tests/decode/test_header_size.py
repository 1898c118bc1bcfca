"""The sizes a dataset index records (issue #29's buckets): read from the first bytes of
every image when a shard is indexed, so they must be right for each format turbofeed
reads and cheap for what is no image at all."""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from turbofeed.decode.probe import header_size, image_format, probe_size

PILLOW_IMAGES = os.path.join(os.path.dirname(__file__), "..", "data", "pillow")


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP", "PPM"])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_each_format_gives_its_size(fmt, mode):
    out = io.BytesIO()
    Image.new(mode, (37, 23)).save(out, fmt)
    assert image_format(out.getvalue()) == fmt
    assert header_size(out.getvalue()) == (23, 37)


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(PILLOW_IMAGES) if not n.endswith(".md")))
def test_pillows_test_images_agree_with_pillow(name):
    with open(os.path.join(PILLOW_IMAGES, name), "rb") as f:
        data = f.read()
    with Image.open(io.BytesIO(data)) as im:
        assert header_size(data) == (im.height, im.width)


def test_what_is_no_image_is_never_handed_to_pillow(monkeypatch):
    """Pillow's open tries each of its plugins on unknown bytes (about 200 us a sample, once
    per sample of an index); a JPEG header libjpeg-turbo cannot read is damage, not retried."""
    def refuse(*args, **kwargs):
        raise AssertionError("Pillow was asked")

    monkeypatch.setattr(Image, "open", refuse)
    for data in (b"", b"not an image at all", b"RIFF\0\0\0\0AVI "):
        assert header_size(data) is None
        reads: list[int] = []
        assert probe_size(lambda n: reads.append(n) or data[:n], 1 << 20) == (0, 0)
        assert len(reads) == 1  # no second, larger read for bytes that announce no image
    garbage = b"\xff\xd8\xff\xe0" + bytes(range(96))  # a JPEG's first bytes, then rubbish
    assert header_size(garbage) is None
    assert probe_size(lambda n: garbage[:n], len(garbage)) == (0, 0)


def test_a_header_past_the_first_read_is_found_with_the_second():
    """An EXIF block before the frame header: the first 16 KiB do not reach it."""
    out = io.BytesIO()
    Image.new("RGB", (40, 30)).save(out, "JPEG", exif=b"Exif\0\0" + bytes(40000))
    data = out.getvalue()
    assert header_size(data[:16 << 10]) is None
    assert probe_size(lambda n: data[:n], len(data)) == (30, 40)
