"""EXIF orientation: read the tag, and turn pixels (or a crop window) upright.

Cameras store pixels as the sensor read them and say in the EXIF Orientation tag (1-8)
how to turn them upright. ``apply_exif_orientation=True`` on the loaders (torchvision's
name; default False, as torchvision and Pillow) gives the image Pillow's
``ImageOps.exif_transpose`` gives, on every path:

- full decodes turn the decoded pixels (:func:`upright`, views);
- the native crop decoder does not turn the whole image: the crop window, chosen on the
  upright image, is mapped back onto the stored pixels (:func:`stored_box`), only that
  part is decoded, and the small output is turned (mirrored filter weights and, for a
  transpose, the two resampling passes in the other order round apart: pixels may differ
  from the resize of Pillow's turned image by 1 level);
- the GPU path turns each decoded tensor (:func:`upright_chw`).

Each orientation is a transpose (or not) followed by mirror images; with U the upright
pixels and S the stored ones, U = flips(transpose(S)):

=====  ==============================  =========  =======  =======
 tag    ``Image.Transpose`` (Pillow)    transpose  flip x   flip y
=====  ==============================  =========  =======  =======
 1      (none)                          no         no       no
 2      FLIP_LEFT_RIGHT                 no         yes      no
 3      ROTATE_180                      no         yes      yes
 4      FLIP_TOP_BOTTOM                 no         no       yes
 5      TRANSPOSE                       yes        no       no
 6      ROTATE_270                      yes        yes      no
 7      TRANSVERSE                      yes        yes      yes
 8      ROTATE_90                       yes        no       yes
=====  ==============================  =========  =======  =======
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

from .formats import is_jpeg

TAG = 0x0112
STEPS: dict[int, tuple[bool, bool, bool]] = {
    1: (False, False, False), 2: (False, True, False), 3: (False, True, True), 4: (False, False, True),
    5: (True, False, False), 6: (True, True, False), 7: (True, True, True), 8: (True, False, True),
}


def orientation(data: bytes | bytearray | memoryview | np.ndarray) -> int:
    """The EXIF orientation (1-8) of an encoded image; 1 without one, for pre-decoded
    arrays, or for an unknown value (as ``ImageOps.exif_transpose``). JPEGs are read
    here (the first APP1 Exif segment, as Pillow does), other formats by Pillow."""
    if isinstance(data, np.ndarray):
        return 1
    if is_jpeg(data):
        return jpeg_orientation(data)
    try:
        with Image.open(io.BytesIO(data)) as im:
            value = im.getexif().get(TAG, 1)
    except Exception:  # unreadable: the decoder names the error
        return 1
    return value if value in STEPS else 1


def jpeg_orientation(data: bytes | bytearray | memoryview) -> int:
    """The Orientation tag of a JPEG's first APP1 Exif segment (1 without one); reads the
    markers before the first scan only, a few microseconds."""
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:  # junk before a marker (libjpeg skips it too)
            i += 1
            continue
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xDA, 0xD9):  # start of scan, end of image: no Exif before
            return 1
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if marker == 0xE1 and bytes(data[i + 4:i + 10]) == b"Exif\0\0":
            return _tiff_orientation(bytes(data[i + 10:i + 2 + length]))
        i += 2 + length
    return 1


def _tiff_orientation(tiff: bytes) -> int:
    """The Orientation entry of IFD0 of an Exif TIFF block; 1 when missing or malformed."""
    if tiff[:2] == b"II":
        order: Any = "little"
    elif tiff[:2] == b"MM":
        order = "big"
    else:
        return 1
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return 1
    for k in range(int.from_bytes(tiff[ifd:ifd + 2], order)):
        entry = tiff[ifd + 2 + 12 * k:ifd + 14 + 12 * k]
        if len(entry) < 12:
            return 1
        if int.from_bytes(entry[:2], order) == TAG:
            if int.from_bytes(entry[2:4], order) != 3:  # not a SHORT
                return 1
            value = int.from_bytes(entry[8:10], order)
            return value if value in STEPS else 1
    return 1


def upright_size(height: int, width: int, tag: int) -> tuple[int, int]:
    """The (height, width) of the upright image of a stored ``height x width`` one."""
    return (width, height) if STEPS[tag][0] else (height, width)


def stored_box(box: tuple[float, float, float, float], height: int, width: int,
               tag: int) -> tuple[float, float, float, float]:
    """A box ``(x0, y0, x1, y1)`` on the upright image (``height x width``) as the box of
    the same pixels on the stored image; resampled there, the output is turned upright
    by :func:`upright` (its size transposed when the orientation transposes)."""
    transpose, flip_x, flip_y = STEPS[tag]
    x0, y0, x1, y1 = box
    if flip_x:
        x0, x1 = width - x1, width - x0
    if flip_y:
        y0, y1 = height - y1, height - y0
    return (y0, x0, y1, x1) if transpose else (x0, y0, x1, y1)


def upright(pixels: np.ndarray, tag: int) -> np.ndarray:
    """HWC (or HW) ``pixels`` as stored, turned upright: a view, no copy."""
    transpose, flip_x, flip_y = STEPS[tag]
    if transpose:
        pixels = pixels.swapaxes(0, 1)
    if flip_x:
        pixels = pixels[:, ::-1]
    if flip_y:
        pixels = pixels[::-1]
    return pixels


def upright_chw(tensor: Any, tag: int) -> Any:
    """A (C, H, W) torch tensor as stored, turned upright (``flip`` copies)."""
    transpose, flip_x, flip_y = STEPS[tag]
    if transpose:
        tensor = tensor.transpose(1, 2)
    dims = [d for d, on in ((2, flip_x), (1, flip_y)) if on]
    return tensor.flip(dims) if dims else tensor
