"""Resample a decoded image into its window and write it into a batch slot."""

from __future__ import annotations

import numpy as np
from PIL import Image

from .views import Window
from .output import OutputSpec


def resample(image: np.ndarray, window: Window) -> np.ndarray:
    """Crop ``window.box`` from an HWC uint8 image and resize it to the window size.

    One antialiased bilinear Pillow resize with a box, torchvision's PIL path for
    ``resized_crop``; returns ``image`` itself when the window is the whole image.
    """
    height, width = image.shape[:2]
    x0, y0, x1, y1 = window.box
    box = (max(0.0, x0), max(0.0, y0), min(float(width), x1), min(float(height), y1))
    if box == (0.0, 0.0, float(width), float(height)) and (window.height, window.width) == (height, width):
        return image
    pil = Image.fromarray(image)
    return np.asarray(pil.resize((window.width, window.height), Image.Resampling.BILINEAR, box=box))


def nearest(pixels: np.ndarray, window: Window, source: tuple[int, int]) -> np.ndarray:
    """The image's crop window and flip applied to a paired field (a mask, a depth map):
    nearest-neighbour, so class indices stay class indices.

    ``window`` was chosen for an image of ``source`` (height, width); ``pixels`` (H, W)
    or (H, W, C) may have another size, the box is scaled to it. Output pixel ``(y, x)``
    takes the source pixel holding the centre of the area it covers, as a bilinear
    resample of the image centres its samples, so the two stay aligned pixel for pixel.
    """
    height, width = pixels.shape[:2]
    x0, y0, x1, y1 = window.box
    sy, sx = height / source[0], width / source[1]
    rows = y0 * sy + (np.arange(window.height) + 0.5) * ((y1 - y0) * sy / window.height)
    cols = x0 * sx + (np.arange(window.width) + 0.5) * ((x1 - x0) * sx / window.width)
    rows = np.clip(np.floor(rows).astype(np.int64), 0, height - 1)
    cols = np.clip(np.floor(cols).astype(np.int64), 0, width - 1)
    if window.flip:
        cols = cols[::-1]
    return pixels[rows[:, None], cols[None, :]]


def write_slot(pixels: np.ndarray, out: np.ndarray, *, flip: bool, channels_first: bool,
               output: OutputSpec | None) -> None:
    """Copy HWC uint8 ``pixels`` into ``out`` (CHW or HWC), flipped and converted as asked.

    The NumPy normalisation: ``(pixel - output.offset) * output.factor`` in float32,
    rounded once to ``out.dtype`` (see :class:`OutputSpec`), the same bits as
    :func:`turbofeed.transforms.batched.normalize` and the native decoder.
    """
    src = pixels[:, ::-1] if flip else pixels
    if channels_first:
        src = src.transpose(2, 0, 1)
    if output is None:
        np.copyto(out, src)
        return
    shape = (3, 1, 1) if channels_first else (3,)
    offset = output.offset.astype(np.float32, copy=False).reshape(shape)
    factor = output.factor.astype(np.float32, copy=False).reshape(shape)
    work = out if out.dtype == np.float32 else np.empty(out.shape, np.float32)
    np.subtract(src, offset, out=work, dtype=np.float32)
    np.multiply(work, factor, out=out, dtype=np.float32, casting="unsafe")


def hwc_pixels(pixels: np.ndarray, *, flip: bool, output: OutputSpec | None) -> np.ndarray:
    """One image's HWC pixels as a sample hands them out: flipped, and converted to
    ``output.dtype`` by :func:`write_slot` when there is an output op (else uint8, the
    input itself when there is nothing to do)."""
    if output is None:
        return np.ascontiguousarray(pixels[:, ::-1]) if flip else pixels
    out = np.empty(pixels.shape, output.dtype)
    write_slot(pixels, out, flip=flip, channels_first=False, output=output)
    return out
