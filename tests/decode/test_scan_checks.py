"""native.scan_checks, the dataset index's scan check: for each image member of a file,
the verdict a loader's first check (decode.scan.check) gives, read and checked in one
call without the GIL."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

from builders import encode, photo
from image_cases import cut_scan, junk_before_marker, ones_in_scan, textured
from turbofeed.decode import native, scan

pytestmark = pytest.mark.skipif(not native.built(), reason="turbofeed.decode._crop is not built")

GOOD = encode(Image.fromarray(textured()), quality=90)  # 320 x 240
CASES = {
    "intact": GOOD,
    "cut": cut_scan(GOOD, 0.85),
    "ones": ones_in_scan(GOOD, 0.9),
    "junk before a marker": junk_before_marker(GOOD),  # a header warning: intact
    "progressive": encode(photo(60, 80, seed=1), progressive=True, quality=90),
    "progressive cut": cut_scan(encode(photo(60, 80, seed=1), progressive=True, quality=90), 0.7),
    "gray": encode(photo(40, 30, seed=2).convert("L")),
    "cmyk": encode(photo(20, 10, seed=3).convert("CMYK")),
    "png": encode(photo(12, 7), "PNG"),
    "short": GOOD[:3],
    "no EOI": GOOD[:-2],
}
EXPECTED = {"intact": native.SCAN_INTACT, "cut": native.SCAN_DAMAGED, "ones": native.SCAN_DAMAGED,
            "junk before a marker": native.SCAN_INTACT, "progressive": native.SCAN_INTACT,
            "progressive cut": native.SCAN_DAMAGED, "gray": native.SCAN_INTACT, "cmyk": native.SCAN_INTACT,
            "png": native.SCAN_UNKNOWN, "short": native.SCAN_UNKNOWN, "no EOI": native.SCAN_DAMAGED}


def checks(tmp_path, blobs: list[bytes], **kw) -> np.ndarray:
    path = tmp_path / "members"
    path.write_bytes(b"".join(blobs))
    sizes = np.array([len(b) for b in blobs], np.int64)
    offsets = np.cumsum(sizes) - sizes
    fd = os.open(path, os.O_RDONLY)
    try:
        return native.scan_checks(fd, offsets, sizes, **kw)
    finally:
        os.close(fd)


def test_each_verdict_is_what_a_loaders_check_says(tmp_path):
    found = checks(tmp_path, list(CASES.values()))
    assert found.dtype == np.uint8
    assert dict(zip(CASES, found.tolist())) == EXPECTED
    for name, data in CASES.items():  # the same native check as decode.scan.check
        if EXPECTED[name] == native.SCAN_UNKNOWN:
            continue
        try:
            scan.check(data)
            said = native.SCAN_INTACT
        except ValueError:
            said = native.SCAN_DAMAGED
        assert said == EXPECTED[name], name


def test_an_image_over_the_limit_or_past_the_end_is_not_checked(tmp_path):
    assert checks(tmp_path, [GOOD, GOOD], max_pixels=320 * 240 - 1).tolist() == [native.SCAN_UNKNOWN] * 2
    assert checks(tmp_path, [GOOD], max_pixels=320 * 240).tolist() == [native.SCAN_INTACT]
    path = tmp_path / "short"
    path.write_bytes(GOOD[:-100])  # the file ends inside the member it lists
    fd = os.open(path, os.O_RDONLY)
    try:
        found = native.scan_checks(fd, np.array([0], np.int64), np.array([len(GOOD)], np.int64))
        assert found.tolist() == [native.SCAN_UNKNOWN]
    finally:
        os.close(fd)
    assert checks(tmp_path, []).tolist() == []


def test_a_failed_read_raises(tmp_path):
    with pytest.raises(OSError):
        native.scan_checks(-1, np.array([0], np.int64), np.array([len(GOOD)], np.int64))
    with pytest.raises(ValueError, match="differ in length"):
        native.scan_checks(0, np.array([0, 1], np.int64), np.array([4], np.int64))
