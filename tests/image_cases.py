"""Images that are damaged, odd or rotated, built from real encoders' bytes (importable by
every test module: pytest's ``pythonpath`` holds ``tests/``)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from builders import encode


def textured(h: int = 240, w: int = 320, seed: int = 0) -> np.ndarray:
    """An HWC uint8 image with gradients and noise: JPEG scans of it are long, and every
    row is different, so grey rows from a damaged scan show."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([(x * 0.8) % 256, y % 256, ((x + y) * 0.5) % 256], axis=2)
    return (rgb + rng.integers(0, 40, rgb.shape)).clip(0, 255).astype(np.uint8)


def scan_bounds(jpeg: bytes) -> tuple[int, int]:
    """(first, end) byte offsets of the entropy-coded data of a baseline JPEG's one scan
    (after the SOS header, before the EOI marker)."""
    sos = jpeg.index(b"\xff\xda")
    first = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], "big")
    assert jpeg.endswith(b"\xff\xd9")
    return first, len(jpeg) - 2


def cut_scan(jpeg: bytes, fraction: float = 0.5) -> bytes:
    """The scan cut after ``fraction`` of its bytes, EOI appended: the file still ends
    with EOI, and libjpeg fills the rest with grey after "premature end of data segment"."""
    first, end = scan_bounds(jpeg)
    return jpeg[:first + int((end - first) * fraction)] + b"\xff\xd9"


def ones_in_scan(jpeg: bytes, fraction: float = 0.75) -> bytes:
    """8 bytes of the scan at ``fraction`` overwritten with 32 one-bits (FF 00 is a
    stuffed FF): no Huffman code is all ones, so libjpeg warns "bad Huffman code"."""
    first, end = scan_bounds(jpeg)
    at = first + int((end - first) * fraction)
    return jpeg[:at] + b"\xff\x00" * 4 + jpeg[at + 8:]


def junk_before_marker(jpeg: bytes) -> bytes:
    """3 junk bytes before the first DQT marker: libjpeg warns "3 extraneous bytes before
    marker 0xdb" while reading the header; the pixels are intact."""
    at = jpeg.index(b"\xff\xdb")
    return jpeg[:at] + b"\x00\x01\x02" + jpeg[at:]


def exif_jpeg(pixels: np.ndarray, orientation: int, quality: int = 95) -> bytes:
    """A JPEG of ``pixels`` as stored, with an EXIF Orientation tag (written by Pillow)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(Image.fromarray(pixels), quality=quality, exif=exif.tobytes())


def grey16_png(values: np.ndarray) -> bytes:
    """A 16-bit greyscale PNG of the uint16 ``values`` (Pillow reads it as mode I;16)."""
    im = Image.frombytes("I;16B", values.shape[::-1], values.astype(">u2").tobytes())
    return encode(im, "PNG")


def grey16_tiff(values: np.ndarray) -> bytes:
    """A 16-bit greyscale TIFF of the uint16 ``values``."""
    im = Image.frombytes("I;16B", values.shape[::-1], values.astype(">u2").tobytes())
    return encode(im, "TIFF")


def animated_gif(colours: list[tuple[int, int, int]], size: tuple[int, int] = (40, 30)) -> bytes:
    """An animated GIF, one flat frame per colour (the first frame is ``colours[0]``)."""
    frames = [Image.new("RGB", size, c) for c in colours]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    return buf.getvalue()
