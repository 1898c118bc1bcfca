"""Damage inside a JPEG's entropy-coded data is a bad sample on every decode path and
whatever the crop; warnings about the header (junk bytes before a marker) are not.

The damaged JPEGs are real encoder output with their scan cut short (EOI appended, so
the file still looks complete) or overwritten with a run of one-bits (no Huffman code is
all ones); libjpeg reports both only as warnings and fills the rest with grey.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from builders import encode
from image_cases import cut_scan, junk_before_marker, ones_in_scan, textured
from turbofeed.decode import decode, decode_jpeg, decode_mask, decode_pillow, native, scan

needs_native = pytest.mark.skipif(not native.available(), reason="turbofeed.decode._crop is not built")

GOOD = encode(Image.fromarray(textured()), quality=90)  # 320 x 240
DAMAGED = {"cut": cut_scan(GOOD, 0.5), "ones": ones_in_scan(GOOD, 0.75)}
TOP, BOTTOM = (0.0, 0.0, 320.0, 40.0), (0.0, 200.0, 320.0, 240.0)  # above / inside the damage


def crop(data: bytes, box, **kw) -> np.ndarray:
    out = np.zeros((3, 32, 32), np.uint8)
    native.crop_resize(data, box, out, **kw)
    return out


def test_the_damage_is_real():
    """The cases are what the tests claim: Pillow decodes them without a word, with grey
    rows below the damage and intact rows above it."""
    reference = np.asarray(Image.open(io.BytesIO(GOOD)).convert("RGB")).astype(int)
    for name, data in DAMAGED.items():
        with Image.open(io.BytesIO(data)) as im:
            pixels = np.asarray(im.convert("RGB")).astype(int)
        wrong_rows = (np.abs(pixels - reference).max(axis=(1, 2)) > 40).nonzero()[0]
        assert len(wrong_rows) > 0 and wrong_rows.min() >= 100, name


@needs_native
@pytest.mark.parametrize("name", sorted(DAMAGED))
@pytest.mark.parametrize("box", [TOP, BOTTOM], ids=["window-above-damage", "window-on-damage"])
def test_native_crop_refuses_damage_whatever_the_window(name, box):
    with pytest.raises(ValueError, match="Corrupt JPEG data"):
        crop(DAMAGED[name], box)
    crop(GOOD, box)  # and the next image still decodes


@needs_native
def test_without_check_scan_the_rows_below_the_window_are_not_read():
    """check_scan=False (a sample already found intact) stops after the window's last row,
    as before: the loader relies on checking a sample the first time it sees it."""
    assert np.array_equal(crop(DAMAGED["cut"], TOP, check_scan=False), crop(GOOD, TOP))
    with pytest.raises(ValueError, match="premature end"):
        crop(DAMAGED["cut"], BOTTOM, check_scan=False)


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_scan_check_names_the_damage(name):
    with pytest.raises(ValueError, match="^damaged JPEG: Corrupt JPEG data"):
        scan.check(DAMAGED[name])
    scan.check(GOOD)


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_full_decode_and_pillow_fallback_refuse_damage(name):
    data = DAMAGED[name]
    with pytest.raises(ValueError, match="Corrupt JPEG data"):
        decode(data)
    with pytest.raises(ValueError, match="Corrupt JPEG data"):
        decode_jpeg(data)
    with pytest.raises(ValueError, match="^damaged JPEG"):
        decode_pillow(data)  # Pillow itself would fill the rows with grey


def test_junk_before_a_header_marker_is_delivered_intact():
    junk = junk_before_marker(GOOD)
    scan.check(junk)
    assert np.array_equal(decode(junk), decode(GOOD))
    assert np.array_equal(decode_pillow(junk), decode(GOOD))


@needs_native
def test_junk_before_a_header_marker_takes_the_native_path():
    junk = junk_before_marker(GOOD)
    assert native.header(junk)[:2] == (240, 320)
    for box in (TOP, BOTTOM):
        assert np.array_equal(crop(junk, box), crop(GOOD, box))


def test_damage_after_header_junk_is_still_damage():
    """Junk in the header makes simplejpeg refuse the file (Pillow decodes it then): the
    scan check still judges the scan."""
    both = junk_before_marker(DAMAGED["cut"])
    with pytest.raises(ValueError, match="^bad JPEG: Corrupt JPEG data: premature end of data segment"):
        decode(both)


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_check_without_the_extension(monkeypatch, name):
    """Where the extension is not built, simplejpeg judges. (The extension is built here,
    so its absence is simulated by hiding it from the module.)"""
    monkeypatch.setattr(scan, "_crop", None)
    with pytest.raises(ValueError, match="^damaged JPEG"):
        scan.check(DAMAGED[name])
    scan.check(GOOD)
    scan.check(junk_before_marker(GOOD))  # trusted: the header warns, nothing to judge by


def test_progressive_damage_is_seen_at_any_window():
    """A progressive JPEG is read whole before its first row: cut scans are refused."""
    progressive = encode(Image.fromarray(textured()), quality=90, progressive=True)
    damaged = progressive[:len(progressive) * 2 // 3] + b"\xff\xd9"
    with pytest.raises(ValueError):
        decode(damaged)
    with pytest.raises(ValueError):
        scan.check(damaged)
    if native.available():
        with pytest.raises(ValueError):
            crop(damaged, TOP)


def test_a_damaged_grey_jpeg_mask_is_refused():
    """Masks keep their stored values through Pillow (decode_mask), which would fill a
    damaged scan with grey: the scan is checked there too."""
    grey = encode(Image.fromarray(textured()[:, :, 0]), quality=90)
    assert decode_mask(grey).shape == (240, 320)
    with pytest.raises(ValueError, match="damaged JPEG: Corrupt JPEG data"):
        decode_mask(cut_scan(grey))
