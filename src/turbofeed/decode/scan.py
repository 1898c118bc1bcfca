"""Is a JPEG's entropy-coded data intact? One verdict for every decode path.

libjpeg reports damage inside the entropy-coded data (a scan cut short, a bad Huffman
code, bytes a scan left unused) only as *warnings*, and fills what it could not decode
with grey; Pillow ignores those warnings, and nvJPEG may decode garbage silently. Here
such an image is damaged, a bad sample, on every path: the native crop decoder checks
the whole scan (:func:`turbofeed.decode.native.crop_resize`), the full decode is strict
(simplejpeg, ``strict=True``), and the Pillow fallback and the GPU path ask
:func:`check` first.

Warnings about the header before the first scan (junk bytes before a marker, an
unknown JFIF revision or Adobe transform, a bad ICC chunk) are not damage: the pixels
are intact, and those images are delivered.

:func:`check` uses the native extension when it is built (even under
``TURBOFEED_NATIVE=0``: this is about correctness, not speed). Without it, simplejpeg
judges: the header must read without warnings, and a strict decode's corrupt-data error
is damage; a JPEG whose header itself warns cannot be checked then and is trusted.
"""

from __future__ import annotations

import numpy as np

from .._deps import simplejpeg
from .limits import DEFAULT, DefaultLimit, check_pixels, resolve

try:
    from . import _crop
except ImportError:  # not built: simplejpeg judges (see above)
    _crop = None  # type: ignore[assignment]

# libjpeg's messages for damaged data (jerror.h: JWRN_HIT_MARKER, JWRN_HUFF_BAD_CODE,
# JWRN_ARITH_BAD_CODE, JWRN_EXTRANEOUS_DATA after a scan, JWRN_MUST_RESYNC, JWRN_JPEG_EOF,
# JWRN_BOGUS_PROGRESSION, JWRN_NOT_SEQUENTIAL), for the check without the extension.
_DAMAGE = ("Corrupt JPEG data", "Premature end of JPEG file", "Inconsistent progression sequence",
           "Invalid SOS parameters for sequential JPEG")


def check(data: bytes | bytearray | memoryview | np.ndarray, *,
          max_pixels: int | None | DefaultLimit = DEFAULT) -> None:
    """Raise when the entropy-coded data of JPEG ``data`` is damaged.

    Raises:
        ImageTooLarge: more pixels than ``max_pixels`` (from the header, before any work).
        ValueError: damaged (``"damaged JPEG: <libjpeg's message>"``), or unreadable.
    """
    limit = resolve(max_pixels)
    if _crop is not None:
        try:
            _crop.check(data, max_pixels=limit or 0)
        except ValueError as exc:
            if type(exc) is not ValueError:  # ImageTooLarge
                raise
            raise ValueError(f"damaged JPEG: {str(exc).removeprefix('bad JPEG: ')}") from None
        return
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return  # the header warns (junk before a marker): cannot be checked without the extension
    check_pixels(height, width, limit)
    try:
        simplejpeg.decode_jpeg(data, colorspace="GRAY", strict=True)
    except ValueError as exc:
        if str(exc).startswith(_DAMAGE):
            raise ValueError(f"damaged JPEG: {exc}") from None
