"""Output ops: what the batch holds. Without one, batches stay uint8 (4x fewer bytes)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Output dtype -> the NumPy dtype of host buffers. NumPy has no bfloat16: host batches
# are float32 and become bfloat16 as torch tensors (on the GPU paths the batched op
# writes bfloat16 directly).
_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "bfloat16": np.float32}


@dataclass(frozen=True)
class OutputSpec:
    """``out = (pixel - offset) * factor`` per channel, the one definition of the output op.

    Computed in float32 and rounded once to the output dtype, by exactly two
    implementations, which give the same bits as each other and as the native decoder
    (float32 only, :func:`turbofeed.decode.native.crop_resize` with ``offset``/``factor``):

    - NumPy: :func:`turbofeed.transforms.write_slot` (host buffers of ``dtype``; one
      image's HWC pixels: :func:`turbofeed.transforms.hwc_pixels`);
    - torch: :func:`turbofeed.transforms.batched.normalize` (any device, delivered as
      ``torch_dtype``, the name of a ``torch`` dtype).
    """

    dtype: np.dtype
    offset: np.ndarray  # shape (3,)
    factor: np.ndarray  # shape (3,)
    torch_dtype: str = "float32"


def _dtype(name: str) -> tuple[np.dtype, str]:
    name = str(name).replace("torch.", "")
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {name!r}")
    return np.dtype(_DTYPES[name]), name


class Normalize:
    """Normalise with ``mean``/``std`` given on the [0, 1] scale, as torchvision's
    ``Normalize`` after ``ToTensor``: ``out = (pixel / 255 - mean) / std``, in ``dtype``
    (``"float32"``, ``"float16"``, ``"bfloat16"`` or ``"float64"``)."""

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 dtype: str = "float32") -> None:
        # Checked here, not per image: a zero std gives inf pixels with no error at all.
        mean, std = tuple(mean), tuple(std)
        if len(mean) != 3 or not all(math.isfinite(m) for m in mean):
            raise ValueError(f"Normalize: mean needs 3 finite values (R, G, B), got {mean!r}")
        if len(std) != 3 or not all(math.isfinite(s) and s > 0 for s in std):
            raise ValueError(f"Normalize: std needs 3 finite values > 0 (R, G, B), got {std!r}")
        self.mean, self.std, self.dtype = tuple(mean), tuple(std), dtype
        host, name = _dtype(dtype)
        self.spec = OutputSpec(host, np.asarray(mean, np.float32) * 255, 1.0 / (np.asarray(std, np.float32) * 255),
                               name)

    def __call__(self, images: Any) -> Any:
        """As a torch op on a uint8 (..., 3, H, W) tensor (after user callables)."""
        return _on_tensor(images, self.spec)

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std}, dtype={self.dtype!r})"


class ToDtype:
    """Convert to a float ``dtype``; ``scale=True`` maps 0..255 to 0..1."""

    def __init__(self, dtype: str = "float32", scale: bool = True) -> None:
        self.dtype, self.scale = dtype, scale
        factor = np.float32(1 / 255 if scale else 1.0)
        host, name = _dtype(dtype)
        self.spec = OutputSpec(host, np.zeros(3, np.float32), np.full(3, factor, np.float32), name)

    def __call__(self, images: Any) -> Any:
        """As a torch op on a uint8 (..., 3, H, W) tensor (after user callables)."""
        return _on_tensor(images, self.spec)

    def __repr__(self) -> str:
        return f"ToDtype({self.dtype!r}, scale={self.scale})"


def _on_tensor(images: Any, spec: OutputSpec) -> Any:
    from .batched import normalize  # imports torch: only when used on tensors

    return normalize(images, spec)
