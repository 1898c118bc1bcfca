"""Resample a decoded image into its window and write it into a batch slot."""

from __future__ import annotations

import numpy as np
from PIL import Image

from .geometry import Window
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
