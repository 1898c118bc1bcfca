"""CPU decoding: libjpeg-turbo through simplejpeg (releases the GIL), Pillow for the rest.

Every image comes out as HWC uint8 RGB: grayscale is replicated, CMYK/YCCK converted
(libjpeg-turbo and Pillow agree within 1 level), progressive JPEGs decode as usual,
alpha is dropped.
"""

from __future__ import annotations

import io

import numpy as np
import simplejpeg
from PIL import Image

from .probe import is_jpeg


def decode_jpeg(data: bytes) -> np.ndarray:
    """Decode a JPEG strictly: a truncated or corrupt stream raises ValueError instead
    of yielding grey rows."""
    return simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True)


def decode_pillow(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        rgb = im if im.mode == "RGB" else im.convert("RGB")
        return np.asarray(rgb)


def decode(data: bytes) -> np.ndarray:
    """Decode any supported image to an HWC uint8 RGB array.

    Raises:
        ValueError: empty, truncated, corrupt or unsupported image, with the reason.
    """
    if not data:
        raise ValueError("empty file (0 bytes)")
    if is_jpeg(data):
        try:
            return decode_jpeg(data)
        except ValueError as jpeg_error:
            try:  # Pillow reads a few JPEG variants libjpeg-turbo's RGB path refuses
                return decode_pillow(data)
            except Exception:
                raise ValueError(f"bad JPEG: {jpeg_error}") from None
    try:
        return decode_pillow(data)
    except Exception as exc:  # Pillow raises many types for rubbish input
        raise ValueError(f"not a decodable image ({type(exc).__name__}: {exc})") from None
