"""CPU decoding: libjpeg-turbo through simplejpeg (releases the GIL), Pillow for the rest.

Every image comes out as HWC uint8 RGB: grayscale is replicated, CMYK/YCCK converted
(libjpeg-turbo and Pillow agree within 1 level), progressive JPEGs decode as usual,
alpha is dropped, 16-bit images keep their high byte (as OpenCV and torchvision do),
animated images (GIF, WebP, APNG) give their first frame.

A JPEG whose entropy-coded data is damaged raises on every path (see
:mod:`turbofeed.decode.scan`): the libjpeg-turbo decode is strict, and the Pillow
fallback, which would fill the damaged part with grey, checks the scan first.

Each decoder first checks the size its header declares against the pixel limit
(:mod:`turbofeed.decode.limits`) and raises :class:`~turbofeed.errors.ImageTooLarge`
above it, before anything the size of the image is allocated; ``max_pixels`` (default:
:func:`~turbofeed.decode.limits.max_pixels` at call time) sets it per call.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from PIL import Image

from .._deps import simplejpeg
from ..errors import ImageTooLarge
from .limits import DEFAULT, DefaultLimit, check_pixels, resolve
from . import scan
from .formats import IMAGE_FORMATS, image_format

# Pillow's unsigned 16-bit grey modes (16-bit PNG and TIFF); 16-bit RGB(A) PNGs already
# open as 8-bit RGB(A), by their high byte.
_UINT16_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})


def decode_jpeg(data: bytes, *, max_pixels: int | None | DefaultLimit = DEFAULT) -> np.ndarray:
    """Decode a JPEG strictly: a truncated or corrupt stream raises ValueError instead
    of yielding grey rows; one declaring more than ``max_pixels`` raises ImageTooLarge."""
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    check_pixels(height, width, resolve(max_pixels))
    return simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True)


def decode_pillow(data: bytes, *, max_pixels: int | None | DefaultLimit = DEFAULT) -> np.ndarray:
    """Decode any image Pillow reads. Pillow's own check only raises above twice its limit:
    the size of this very Image object is checked before its pixels are loaded, so no
    format (or header Pillow reads differently from libjpeg) gets around the limit."""
    limit = resolve(max_pixels)
    with Image.open(io.BytesIO(data)) as im:
        check_pixels(im.height, im.width, limit)
        if IMAGE_FORMATS.get(im.format, IMAGE_FORMATS[None]).scan_check:  # Pillow fills damage with grey
            scan.check(data, max_pixels=limit)
        im.load()  # the first frame of an animated image
        if im.mode in _UINT16_MODES:  # 16-bit grey: the high byte, not Pillow's clip to 255
            grey = (np.asarray(im).astype(np.uint16) >> 8).astype(np.uint8)
            return np.repeat(grey[:, :, None], 3, axis=2)
        rgb = im if im.mode == "RGB" else im.convert("RGB")
        return np.asarray(rgb)


#: :attr:`ImageFormat.cpu <turbofeed.decode.formats.ImageFormat.cpu>` -> the strict
#: decoder :func:`decode` tries before Pillow ("pillow": none, Pillow alone).
STRICT_DECODERS: dict[str, Callable[..., np.ndarray]] = {"libjpeg-turbo": decode_jpeg}


def as_rgb(array: np.ndarray) -> np.ndarray:
    """A pre-decoded image (HW, HW1, HW3 or HW4, uint8) as HWC uint8 RGB, without a copy
    when it already is one."""
    if array.dtype != np.uint8:
        raise ValueError(f"array sample has dtype {array.dtype}; turbofeed images are uint8")
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3, 4):
        raise ValueError(f"array sample of shape {array.shape} is not an image (H, W[, 1|3|4])")
    if array.shape[2] == 1:
        return np.repeat(array, 3, axis=2)
    return array[:, :, :3]


def decode(data: bytes | np.ndarray, *, max_pixels: int | None | DefaultLimit = DEFAULT) -> np.ndarray:
    """Decode any supported image to an HWC uint8 RGB array (arrays pass through).

    Args:
        data: encoded bytes, or pixels (HW, HW1, HW3 or HW4 uint8).
        max_pixels: the pixel limit (None: none); default :func:`max_pixels` now.

    Raises:
        ImageTooLarge: more pixels than ``max_pixels`` (a ValueError), before decoding.
        ValueError: empty, truncated, corrupt or unsupported image, with the reason.
    """
    limit = resolve(max_pixels)
    if isinstance(data, np.ndarray):
        if data.ndim >= 2:  # before as_rgb, which may copy a grey image three times
            check_pixels(data.shape[0], data.shape[1], limit)
        return as_rgb(data)
    if not data:
        raise ValueError("empty file (0 bytes)")
    fmt = IMAGE_FORMATS[image_format(data)]
    strict = STRICT_DECODERS.get(fmt.cpu)
    if strict is not None:
        try:
            return strict(data, max_pixels=limit)
        except ImageTooLarge:
            raise
        except ValueError as strict_error:
            try:  # Pillow reads a few JPEG variants libjpeg-turbo's RGB path refuses
                return decode_pillow(data, max_pixels=limit)
            except ImageTooLarge:
                raise
            except Exception as pillow_error:  # the scan check's reason, past junk simplejpeg stopped at
                damage = str(pillow_error).removeprefix(f"damaged {fmt.name}: ")
                reason = damage if damage != str(pillow_error) else strict_error
                raise ValueError(f"bad {fmt.name}: {reason}") from None
    try:
        return decode_pillow(data, max_pixels=limit)
    except ImageTooLarge:
        raise
    except Exception as exc:  # Pillow raises many types for rubbish input
        raise ValueError(f"not a decodable image ({type(exc).__name__}: {exc})") from None
