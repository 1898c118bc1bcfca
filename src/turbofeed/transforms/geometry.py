"""Geometric transforms composed into one crop window, chosen from the image header.

Every geometric op maps a *view* (a box in source pixel coordinates and the size the
view has at this point of the pipeline) to a new view. ``Resize(256)`` then
``CenterCrop(224)`` therefore ends as one box of the source image and one output
size, so the image is resampled once, and the box is known before decoding (the
decoder may skip what lies outside it).

Parameter semantics follow torchvision (``RandomResizedCrop.get_params``, integer
crop offsets, ``round`` for centre crops), so recipes port unchanged.
"""

from __future__ import annotations

import math
import numbers
import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class View:
    """A box ``(x0, y0, x1, y1)`` of the source image seen at ``height x width`` pixels."""

    box: tuple[float, float, float, float]
    height: int
    width: int

    @classmethod
    def of_image(cls, height: int, width: int) -> "View":
        return cls((0.0, 0.0, float(width), float(height)), height, width)

    def sub(self, top: float, left: float, height: int, width: int) -> "View":
        """The part ``[top, top+height) x [left, left+width)`` of this view, same scale."""
        return View(self.sub_box(top, left, height, width), height, width)

    def sub_box(self, top: float, left: float, height: int, width: int) -> tuple[float, float, float, float]:
        """The source box of :meth:`sub` alone (a crop that then resizes needs no view
        in between: this runs per sample, holding the GIL)."""
        x0, y0, x1, y1 = self.box
        sx, sy = (x1 - x0) / self.width, (y1 - y0) / self.height
        return (x0 + left * sx, y0 + top * sy, x0 + (left + width) * sx, y0 + (top + height) * sy)


@dataclass(frozen=True)
class Window:
    """What one sample needs: the source box, the output size, and whether to flip."""

    box: tuple[float, float, float, float]
    height: int
    width: int
    flip: bool = False


def _side(owner: str, size: object, value: object) -> int:
    # bool is an int subclass, but Resize(True) is a mistake, not a 1-pixel resize
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: size must be an int or (height, width) of ints, got {size!r}")
    if value < 1:
        raise ValueError(f"{owner}: size must be > 0, got {size!r}")
    return int(value)


def check_size(owner: str, size: object) -> int | tuple[int, int]:
    """``size`` as given if it is a positive int, else a ``(height, width)`` tuple of them.

    Checked when the transform is built: a size of 0 found per image would only surface
    as every sample failing, and the loader would blame the data.

    Raises:
        TypeError: not an int nor a pair of ints.
        ValueError: a side below 1, or not two sides; the message names ``owner``.
    """
    if isinstance(size, (tuple, list)):
        if len(size) != 2:
            raise ValueError(f"{owner}: size must be an int or (height, width), got {size!r}")
        return _side(owner, size, size[0]), _side(owner, size, size[1])
    return _side(owner, size, size)


def _pair(owner: str, size: object) -> tuple[int, int]:
    checked = check_size(owner, size)
    return (checked, checked) if isinstance(checked, int) else checked


def _range(owner: str, name: str, value: Any) -> tuple[float, float]:
    """A ``(min, max)`` range with ``0 < min <= max`` (NaN and infinity refused): a zero
    or negative bound would only fail later, in ``log`` or as empty crops, per image."""
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: {name} must be (min, max), got {value!r}") from None
    if not 0 < low <= high < math.inf:
        raise ValueError(f"{owner}: {name} must be (min, max) with 0 < min <= max, got {value!r}")
    return low, high


class GeometricOp:
    """Base of the ops that move the view. Subclasses implement :meth:`apply`."""

    def apply(self, view: View, rng: random.Random) -> View:
        raise NotImplementedError(f"{type(self).__name__} must implement apply()")


class Resize(GeometricOp):
    """Resize to ``size``: an int sets the shorter side (aspect kept, torchvision's
    truncation of the longer side); ``(height, width)`` sets both."""

    def __init__(self, size: int | tuple[int, int]) -> None:
        self.size = check_size("Resize", size)

    def apply(self, view: View, rng: random.Random) -> View:
        if isinstance(self.size, int):
            h, w = view.height, view.width
            short, long = (h, w) if h <= w else (w, h)
            new_short, new_long = self.size, int(self.size * long / short)
            h, w = (new_short, new_long) if view.height <= view.width else (new_long, new_short)
        else:
            h, w = self.size
        return View(view.box, h, w)

    def __repr__(self) -> str:
        return f"Resize({self.size!r})"


class CenterCrop(GeometricOp):
    """Crop the centre ``size`` (int or (height, width)).

    A view smaller than the crop is cropped to what exists and later resized up to
    ``size`` (torchvision would pad with zeros instead).
    """

    def __init__(self, size: int | tuple[int, int]) -> None:
        self.size = _pair("CenterCrop", size)

    def apply(self, view: View, rng: random.Random) -> View:
        ch, cw = self.size
        h, w = min(ch, view.height), min(cw, view.width)
        top = int(round((view.height - h) / 2.0))
        left = int(round((view.width - w) / 2.0))
        return View(view.sub_box(top, left, h, w), ch, cw)

    def __repr__(self) -> str:
        return f"CenterCrop({self.size!r})"


class RandomResizedCrop(GeometricOp):
    """Crop a random area and aspect ratio, then resize to ``size``.

    Args:
        size: output size, int or (height, width).
        scale: range of the crop area as a fraction of the image area, ``0 < min <= max``
            (a max above 1, as torchvision allows, makes more draws fall back).
        ratio: range of the crop aspect ratio (width / height), sampled log-uniformly,
            ``0 < min <= max``.

    Raises:
        ValueError: a size below 1 or a range that is not ``0 < min <= max``, named in
            the message (also in the other ops: sizes > 0, ``p`` in [0, 1]).
    """

    def __init__(self, size: int | tuple[int, int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> None:
        self.size = _pair("RandomResizedCrop", size)
        self.scale = _range("RandomResizedCrop", "scale", scale)
        self.ratio = _range("RandomResizedCrop", "ratio", ratio)

    def params(self, height: int, width: int, rng: random.Random) -> tuple[int, int, int, int]:
        """torchvision's ``get_params``: (top, left, crop height, crop width)."""
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * rng.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = rng.randrange(height - h + 1)
                left = rng.randrange(width - w + 1)
                return top, left, h, w
        # Fallback to a central crop with the ratio clamped into range.
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, int(round(width / self.ratio[0]))
        elif in_ratio > self.ratio[1]:
            h, w = height, int(round(height * self.ratio[1]))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def apply(self, view: View, rng: random.Random) -> View:
        top, left, h, w = self.params(view.height, view.width, rng)
        return View(view.sub_box(top, left, h, w), *self.size)

    def __repr__(self) -> str:
        return f"RandomResizedCrop({self.size!r}, scale={self.scale}, ratio={self.ratio})"


class RandomHorizontalFlip:
    """Mirror left-right with probability ``p``."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0 <= p <= 1:  # NaN fails too
            raise ValueError(f"RandomHorizontalFlip: p must be a probability in [0, 1], got {p!r}")
        self.p = p

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"
