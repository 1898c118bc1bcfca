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
    """Copy HWC uint8 ``pixels`` into ``out`` (CHW or HWC), flipped and converted as asked."""
    src = pixels[:, ::-1] if flip else pixels
    if channels_first:
        src = src.transpose(2, 0, 1)
    if output is None:
        np.copyto(out, src)
        return
    shape = (3, 1, 1) if channels_first else (3,)
    np.subtract(src, output.offset.reshape(shape), out=out, casting="unsafe")
    np.multiply(out, output.factor.reshape(shape).astype(out.dtype), out=out)
