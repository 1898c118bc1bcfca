"""The Pillow transforms shared by the PyTorch DataLoader and webdataset peers (Pillow +
numpy only), written as a torchvision-style training script would: full decode, one
antialiased bilinear resize of the crop box, flip; CHW arrays the default collate stacks."""

from __future__ import annotations

import io
import random

import numpy as np
from PIL import Image

import _common as C

MEAN = np.array(C.MEAN, np.float32).reshape(3, 1, 1)
STD = np.array(C.STD, np.float32).reshape(3, 1, 1)


def transform(img: Image.Image, pipeline: str, rng: random.Random | None = None) -> np.ndarray:
    """A decoded RGB image -> (3, 224, 224): uint8, or float32 normalised for train-float."""
    if pipeline == "eval":
        rw, rh, left, top = C.eval_geometry(*img.size)
        img = img.resize((rw, rh), Image.BILINEAR).crop((left, top, left + 224, top + 224))
    else:
        rng = rng or random.Random()
        left, top, cw, ch = C.rrc_params(*img.size, rng)
        img = img.resize((224, 224), Image.BILINEAR, box=(left, top, left + cw, top + ch))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
    chw = np.asarray(img).transpose(2, 0, 1)  # a view; collate makes the one copy into the batch
    if pipeline == "train-float":
        return (chw.astype(np.float32) / 255 - MEAN) / STD
    return chw


def decode(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")
