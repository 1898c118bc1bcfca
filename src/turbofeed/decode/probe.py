"""Header-only sniffing: format and size without decoding pixels."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image

from .._deps import simplejpeg
from .formats import image_format, is_jpeg

#: Extensions of image members, and the preferred one when a sample holds several (first
#: match wins).
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "ppm", "pgm", "pbm", "tif", "tiff", "gif")


@dataclass(frozen=True)
class ImageInfo:
    height: int
    width: int
    format: str  # "jpeg" or Pillow's format name, lower case


def probe(data: bytes | np.ndarray) -> ImageInfo:
    """Read the image size from the header (or the shape of a pre-decoded array).

    Raises:
        ValueError: the bytes are empty or no known image format.
    """
    if isinstance(data, np.ndarray):  # pre-decoded sources (HDF5, Zarr, .npy): HWC or HW
        if data.ndim not in (2, 3):
            raise ValueError(f"array sample of shape {data.shape} is not an image (H, W[, C])")
        return ImageInfo(data.shape[0], data.shape[1], "array")
    if not data:
        raise ValueError("empty file (0 bytes)")
    if is_jpeg(data):
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(data)
            return ImageInfo(height, width, "jpeg")
        except ValueError:
            pass  # let Pillow try, it knows a few more JPEG variants (e.g. 12-bit)
    try:
        with Image.open(io.BytesIO(data)) as im:
            return ImageInfo(im.height, im.width, (im.format or "unknown").lower())
    except Exception as exc:  # Pillow raises many types for rubbish input
        raise ValueError(f"not a readable image ({type(exc).__name__}: {exc})") from None


#: Bytes of an image member read to find its size: enough for the headers of nearly every
#: JPEG (SOF after EXIF and ICC segments of a few KiB), PNG, WebP, GIF and BMP.
HEAD_BYTES = 16 << 10
#: A second, larger read for the rest (a JPEG whose EXIF thumbnail or ICC profile comes first).
MORE_BYTES = 256 << 10


def header_size(head: bytes) -> tuple[int, int] | None:
    """``(height, width)`` from the first bytes of an image, or None when they hold no
    readable header: simplejpeg (libjpeg-turbo) for a JPEG, else Pillow for the one format
    the bytes announce; bytes that announce none are not handed to Pillow at all. Unlike
    :func:`probe`, a JPEG header libjpeg-turbo cannot read is not retried with Pillow: this
    runs for every sample a dataset index records, and such a header is damage (the
    decode reports it when the sample is loaded) far more often than a variant only
    Pillow reads."""
    fmt = image_format(head)
    return None if fmt is None else _size_as(head, fmt)


def _size_as(head: bytes, fmt: str) -> tuple[int, int] | None:
    """:func:`header_size` of ``head``, which starts like a ``fmt`` image."""
    if fmt == "JPEG":
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(head)
            return height, width
        except ValueError:
            return None
    try:
        with Image.open(io.BytesIO(head), formats=[fmt]) as im:
            return im.height, im.width
    except Exception:  # Pillow raises many types for rubbish input
        return None


def probe_size(read: Callable[[int], bytes], nbytes: int) -> tuple[int, int]:
    """``(height, width)`` of the image whose first ``n`` bytes ``read(n)`` returns
    (``nbytes`` in all): headers only, at most :data:`HEAD_BYTES` then :data:`MORE_BYTES`
    read; ``(0, 0)`` when neither holds a readable header (not an image, damaged: the
    decode says so when the sample is loaded)."""
    for n in (HEAD_BYTES, MORE_BYTES):
        head = read(min(n, nbytes))
        fmt = image_format(head)
        if fmt is None:  # no image: nothing more to read
            break
        size = _size_as(head, fmt)
        if size is not None:
            return size
        if n >= nbytes:
            break
    return 0, 0
