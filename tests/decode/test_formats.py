"""The image format table (issue 38, item 4): every place that picks a decoder asks
``IMAGE_FORMATS[image_format(data)]``, and for real files it picks what the JPEG magic
test (``is_jpeg``) picked before: libjpeg-turbo, the native crop decoder, the GPU decoder
and the scan check for JPEGs; Pillow for the rest, with the same errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from turbofeed._deps import simplejpeg
from turbofeed.decode import IMAGE_FORMATS, decode, decode_pillow, format_of, image_format, is_jpeg
from turbofeed.decode.formats import SIGNATURES
from turbofeed.decode.gpu import sendable


def old_is_jpeg(data: object) -> bool:
    """``is_jpeg`` as it was, the one test that chose a decoder before the table."""
    return isinstance(data, (bytes, bytearray, memoryview)) and bytes(data[:3]) == b"\xff\xd8\xff"


_OLD_MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"), (b"BM", "BMP"),
              (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"))


def old_image_format(head: bytes) -> str | None:
    """``probe.image_format`` as it was (the index's sniff)."""
    if old_is_jpeg(head):
        return "JPEG"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if len(head) > 2 and head[:1] == b"P" and head[1:2] in b"123456" and head[2:3].isspace():
        return "PPM"
    return next((name for magic, name in _OLD_MAGIC if head.startswith(magic)), None)


def encoded(mode: str, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 256, (24, 40, 3), np.uint8)
    Image.fromarray(pixels).convert(mode).save(out, fmt, **options)
    return out.getvalue()


JPEG = encoded("RGB", "JPEG", quality=90)
CASES = {
    "jpeg": JPEG,
    "jpeg-grey": encoded("L", "JPEG"),
    "jpeg-cmyk": encoded("CMYK", "JPEG"),
    "jpeg-progressive": encoded("RGB", "JPEG", progressive=True),
    "jpeg-memoryview": memoryview(JPEG),
    "png": encoded("RGB", "PNG"),
    "png-rgba": encoded("RGBA", "PNG"),
    "gif": encoded("P", "GIF"),
    "webp": encoded("RGB", "WEBP"),
    "bmp": encoded("RGB", "BMP"),
    "tiff": encoded("RGB", "TIFF"),
    "ppm": encoded("RGB", "PPM"),
    "pgm": encoded("L", "PPM"),
    "tga": encoded("RGB", "TGA"),  # Pillow reads it; no signature here: the general path
    "garbage": b"this is not an image" * 20,
    "riff-not-webp": b"RIFF\0\0\0\0AVI " + bytes(20),
    "short": b"\xff\xd8",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_table_picks_what_is_jpeg_picked(name):
    data = CASES[name]
    row = format_of(data)
    assert row is IMAGE_FORMATS[image_format(data)]
    assert image_format(data) == old_image_format(bytes(data))
    jpeg = old_is_jpeg(data)
    assert is_jpeg(data) is jpeg
    # engine/work.py (native crop), engine/gpu.py (scan check), decode/gpu.py (nvJPEG),
    # decode/cpu.py (libjpeg-turbo first): each was `is_jpeg` before.
    assert (row.native_crop, row.scan_check, row.gpu, row.cpu == "libjpeg-turbo") == (jpeg,) * 4
    assert row.cpu in ("libjpeg-turbo", "pillow")


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_cpu_decode_is_the_same(name):
    data = bytes(CASES[name])
    if name in ("garbage", "riff-not-webp", "short"):
        with pytest.raises(ValueError, match="^not a decodable image"):
            decode(data)
        return
    pixels = decode(data)
    if name.startswith("jpeg") and name != "jpeg-cmyk":
        assert np.array_equal(pixels, simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True))
    elif not name.startswith("jpeg"):
        assert np.array_equal(pixels, decode_pillow(data))
    assert pixels.shape == (24, 40, 3)


def test_a_damaged_jpeg_is_still_a_bad_jpeg():
    with pytest.raises(ValueError, match="^bad JPEG: "):
        decode(JPEG[:len(JPEG) // 2])
    with pytest.raises(ValueError, match="^empty file"):
        decode(b"")


def test_what_goes_to_the_gpu():
    assert sendable(JPEG, None) and sendable(memoryview(JPEG), None)
    assert not sendable(CASES["jpeg-cmyk"], None)  # nvJPEG's RGB output does not take CMYK
    assert not any(sendable(CASES[n], None) for n in ("png", "gif", "webp", "garbage"))


def test_arrays_and_non_bytes_are_no_format():
    for data in (np.zeros((4, 4, 3), np.uint8), None, "\xff\xd8\xff"):
        assert image_format(data) is None and format_of(data) is IMAGE_FORMATS[None]


def test_every_signature_names_a_row_and_is_read_from_the_head():
    for first, candidates in SIGNATURES.items():
        assert len(first) == 2
        for offset, magic, name in candidates:
            assert name in IMAGE_FORMATS and magic[:2 - offset] == first[offset:][:len(magic)]
