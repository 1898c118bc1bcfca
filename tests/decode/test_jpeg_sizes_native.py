"""The native extension's batch JPEG size probe (``native.jpeg_sizes``, csrc/jpeg_sizes.c)
against :func:`turbofeed.decode.probe.probe_size` (simplejpeg, Pillow), which the dataset
index recorded each image's size with before: where the native probe decides (a size,
or no readable header) it must say what ``probe_size`` says, for intact JPEGs of every
layout Pillow writes, truncated ones, ones with junk, flipped bytes or odd sampling
factors in their headers, headers past the first 16 KiB or past 256 KiB, and data that
is no JPEG; and it must decide the usual ones itself (that is its point)."""

from __future__ import annotations

import io
import os
import random

import numpy as np
import pytest
from builders import photo
from image_cases import junk_before_marker
from PIL import Image

from turbofeed.decode import native
from turbofeed.decode.probe import probe_size

if not native.available():
    pytest.skip("the native extension is not built", allow_module_level=True)

PILLOW_IMAGES = os.path.join(os.path.dirname(__file__), "..", "data", "pillow")


def _jpeg(im: Image.Image, **kw) -> bytes:
    out = io.BytesIO()
    im.save(out, "JPEG", **kw)
    return out.getvalue()


def _intact() -> dict[str, bytes]:
    """JPEGs of every layout Pillow writes, with EXIF and ICC segments of several sizes."""
    im = photo(45, 61, seed=3)
    cases = {f"subsampling {s}": _jpeg(im, subsampling=s) for s in (0, 1, 2)}
    cases.update({
        "gray": _jpeg(im.convert("L")),
        "cmyk": _jpeg(im.convert("CMYK")),
        "progressive": _jpeg(im, progressive=True),
        "optimized": _jpeg(im, optimize=True, quality=40),
        "1x1": _jpeg(Image.new("RGB", (1, 1))),
        "wide": _jpeg(Image.new("L", (4000, 3))),
        "exif": _jpeg(im, exif=Image.Exif().tobytes() + b"\0" * 100),
        "exif 30 KiB (header after the first 16 KiB)": _jpeg(im, exif=b"Exif\0\0" + bytes(30_000)),
        "icc 100 KiB": _jpeg(im, icc_profile=bytes(random.Random(1).randrange(256) for _ in range(100_000))),
        "icc 300 KiB (header after 256 KiB)": _jpeg(im, icc_profile=bytes(300_000)),
    })
    for name in sorted(os.listdir(PILLOW_IMAGES)):
        if name.endswith(".jpg"):
            with open(os.path.join(PILLOW_IMAGES, name), "rb") as f:
                cases[name] = f.read()
    return cases


def _sof(data: bytes) -> int:
    """Offset of the SOF marker segment's first component's sampling byte."""
    for marker in (b"\xff\xc0", b"\xff\xc2", b"\xff\xc1"):
        at = data.find(marker)
        if at > 0:
            return at + 11
    raise AssertionError("no SOF")


def _variants() -> dict[str, bytes]:
    cases = _intact()
    rng = random.Random(7)
    base = cases["subsampling 2"]
    sof = _sof(base)
    for cut in sorted(set(range(0, 700, 3)) | {len(base) - 2, len(base) - 1}):
        cases[f"cut at {cut}"] = base[:cut]
    for k in range(400):
        flipped = bytearray(rng.choice([base, cases["gray"], cases["progressive"], cases["cmyk"]]))
        for _ in range(rng.choice([1, 1, 2, 3])):
            flipped[rng.randrange(min(len(flipped), 700))] = rng.randrange(256)
        cases[f"flip {k}"] = bytes(flipped)
    for k, (first, others) in enumerate([(0x14, 0x11), (0x31, 0x11), (0x22, 0x21), (0x22, 0x12), (0x11, 0x22),
                                         (0x44, 0x11), (0x12, 0x11), (0x41, 0x11), (0x00, 0x11)]):
        odd = bytearray(base)
        odd[sof], odd[sof + 3], odd[sof + 6] = first, others, others
        cases[f"sampling {first:#x}/{others:#x}"] = bytes(odd)
    jfif2 = bytearray(base)
    jfif2[base.find(b"JFIF\0") + 5] = 2  # JFIF major version 2: a warning
    cases.update({
        "junk before a marker": junk_before_marker(base),
        "jfif 2": bytes(jfif2),
        "twelve bits": base[:sof - 7] + b"\x0c" + base[sof - 6:],
        "lossless frame": base.replace(b"\xff\xc0", b"\xff\xc3", 1),
        "bench's fake jpeg": b"\xff\xd8\xff\xe0" + bytes(range(96)),
        "soi only": b"\xff\xd8\xff",
        "empty": b"",
        "png": (lambda b: (Image.new("RGB", (5, 4)).save(b, "PNG"), b.getvalue())[1])(io.BytesIO()),
        "rubbish": bytes(rng.randrange(256) for _ in range(300)),
    })
    return cases


def _expected(data: bytes) -> tuple[int, int] | None:
    """probe_size of ``data``; None when it raises (then only it may decide)."""
    try:
        return probe_size(lambda n: data[:n], len(data))
    except Exception:  # noqa: BLE001 - whatever it raises, the native probe must leave it to it
        return None


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, tuple[tuple[int, int, int], tuple[int, int] | None]]:
    """Every variant written into one file at odd offsets, probed in one native call."""
    cases = _variants()
    path = tmp_path_factory.mktemp("sizes") / "images.bin"
    offsets, sizes, blob = [], [], bytearray()
    for data in cases.values():
        blob += b"\x17" * 3  # not aligned: offsets are any byte
        offsets.append(len(blob))
        sizes.append(len(data))
        blob += data
    path.write_bytes(bytes(blob))
    fd = os.open(path, os.O_RDONLY)
    try:
        found = native.jpeg_sizes(fd, np.array(offsets, np.int64), np.array(sizes, np.int64))
    finally:
        os.close(fd)
    return {name: (tuple(map(int, row)), _expected(data)) for (name, data), row in zip(cases.items(), found)}


def test_where_it_decides_it_says_what_probe_size_says(verdicts):
    decided = 0
    for name, ((h, w, verdict), expected) in verdicts.items():
        if verdict == native.SIZE_ASK:
            assert (h, w) == (0, 0), name
            continue
        decided += 1
        assert expected is not None and (h, w) == expected, (name, (h, w, verdict), expected)
        assert (verdict == native.SIZE_OK) == (expected != (0, 0)), name
    assert decided > 0.8 * len(verdicts)


def test_it_decides_the_usual_jpegs_and_leaves_the_rest(verdicts):
    for name in ("subsampling 0", "subsampling 1", "subsampling 2", "gray", "progressive", "optimized", "1x1",
                 "wide", "exif", "exif 30 KiB (header after the first 16 KiB)", "icc 100 KiB", "hopper.jpg"):
        assert verdicts[name][0][2] == native.SIZE_OK, name
    for name in ("bench's fake jpeg", "cut at 300", "junk before a marker", "jfif 2",
                 "icc 300 KiB (header after 256 KiB)"):
        assert verdicts[name][0] == (0, 0, native.SIZE_NONE) and verdicts[name][1] == (0, 0), name
    for name in ("cmyk", "png", "rubbish", "empty", "twelve bits", "lossless frame", "sampling 0x14/0x11"):
        assert verdicts[name][0][2] == native.SIZE_ASK, name


def test_bad_arguments_and_reads_raise(tmp_path):
    path = tmp_path / "one.jpg"
    path.write_bytes(_jpeg(photo(8, 8)))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="differ in length"):
            native.jpeg_sizes(fd, np.zeros(2, np.int64), np.zeros(1, np.int64))
        assert native.jpeg_sizes(fd, np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0, 3)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        native.jpeg_sizes(fd, np.zeros(1, np.int64), np.ones(1, np.int64))  # a closed descriptor
