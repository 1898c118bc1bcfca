"""Views of the source image as the geometric ops move them (:class:`View` one image,
:class:`Views` a chunk, in arrays), and the crop windows they end as (:class:`Window`,
:class:`Windows`): what :mod:`turbofeed.transforms.geometry`'s ops map to and from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


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

    def sub_box(self, top: float, left: float, height: float, width: float) -> tuple[float, float, float, float]:
        """The source box of :meth:`sub` alone (a crop that then resizes needs no view
        in between: this runs per sample, holding the GIL). :meth:`Views.sub` does the
        same operations in the same order."""
        x0, y0, x1, y1 = self.box
        sx, sy = (x1 - x0) / self.width, (y1 - y0) / self.height
        return (x0 + left * sx, y0 + top * sy, x0 + (left + width) * sx, y0 + (top + height) * sy)


_ROWS: dict[int, np.ndarray] = {}


def rows(n: int) -> np.ndarray:
    """``np.arange(n)``, made once per length."""
    rows = _ROWS.get(n)
    if rows is None:
        rows = _ROWS[n] = np.arange(n)
    return rows


class Views:
    """The views of a chunk of ``n`` images (the array form of :class:`View`), stored
    one row per coordinate so that each is contiguous and one operation covers both
    axes (NumPy is several times slower on ``(n, 2)`` columns than on ``(2, n)`` rows).

    Attributes:
        boxes: float64 ``(4, n)``, rows ``x0, y0, x1, y1`` in source pixels.
        sizes: int64 ``(2, n)``, rows ``width, height`` (x first, as in the boxes), or
            ``(2, 1)`` when every view has the one size (after a fixed-size op):
            operations broadcast it. ``x0 .. y1``, ``width`` and ``height`` name the
            rows, ``n`` long. Neither array is written in place: ops return new ones.
        whole: the boxes are the whole images, seen at their own size (``(0, 0,
            width, height)``): :meth:`sub` then needs no scaling (it would multiply by
            exactly 1.0 and add 0.0).
    """

    __slots__ = ("boxes", "sizes", "whole")

    def __init__(self, boxes: np.ndarray, sizes: np.ndarray, whole: bool = False) -> None:
        self.boxes, self.sizes, self.whole = boxes, sizes, whole

    @classmethod
    def of_images(cls, heights: Any, widths: Any) -> "Views":
        """Whole images of ``heights x widths`` (int arrays ``(n,)``, sizes >= 1).

        Raises:
            ValueError: lengths differ, or a size below 1 (no window exists for it).
        """
        heights, widths = np.asarray(heights), np.asarray(widths)
        if heights.shape != widths.shape or heights.ndim != 1:
            raise ValueError(f"heights and widths must be two arrays of one length, got shapes "
                             f"{heights.shape} and {widths.shape}")
        sizes = np.empty((2, heights.shape[0]), np.int64)
        sizes[0], sizes[1] = widths, heights
        if sizes.size and sizes.min() < 1:
            raise ValueError("image sizes must be >= 1 to choose a crop window")
        boxes = np.zeros((4, heights.shape[0]), np.float64)
        boxes[2:] = sizes
        return cls(boxes, sizes, whole=True)

    def sub(self, offsets: np.ndarray, extents: np.ndarray, out_sizes: np.ndarray) -> "Views":
        """The parts ``offsets .. offsets + extents`` (``(2, n)``, rows left, top and
        width, height; whole numbers) of these views, now seen at ``out_sizes``
        (``(2, n)``, or ``(2, 1)`` for all): :meth:`View.sub_box` for every column."""
        boxes = self.boxes
        out = np.empty(boxes.shape, np.float64)
        if self.whole:  # x0 + left * (x1 - x0) / width is left, to the bit
            out[:2] = offsets
            np.add(offsets, extents, out=out[2:])
            return Views(out, out_sizes)
        origin = boxes[:2]
        scale = boxes[2:] - origin
        scale /= self.sizes
        np.multiply(offsets, scale, out=out[:2])
        out[:2] += origin  # x0 + left * sx
        np.add(offsets, extents, out=out[2:])
        out[2:] *= scale
        out[2:] += origin  # x0 + (left + w) * sx
        return Views(out, out_sizes)

    def full_sizes(self) -> np.ndarray:
        """:attr:`sizes` as ``(2, n)``, (a read-only broadcast when shared)."""
        n = self.boxes.shape[1]
        return self.sizes if self.sizes.shape[1] == n else np.broadcast_to(self.sizes, (2, n))

    @property
    def x0(self) -> np.ndarray:
        return self.boxes[0]

    @property
    def y0(self) -> np.ndarray:
        return self.boxes[1]

    @property
    def x1(self) -> np.ndarray:
        return self.boxes[2]

    @property
    def y1(self) -> np.ndarray:
        return self.boxes[3]

    @property
    def width(self) -> np.ndarray:
        return self.full_sizes()[0]

    @property
    def height(self) -> np.ndarray:
        return self.full_sizes()[1]

    def __len__(self) -> int:
        return int(self.boxes.shape[1])

    def __getitem__(self, i: int) -> View:
        """Image ``i`` as a scalar :class:`View` (Python floats and ints)."""
        x0, y0, x1, y1 = (float(v) for v in self.boxes[:, i])
        return View((x0, y0, x1, y1), int(self.height[i]), int(self.width[i]))


@dataclass(frozen=True)
class Window:
    """What one sample needs: the source box, the output size, and whether to flip."""

    box: tuple[float, float, float, float]
    height: int
    width: int
    flip: bool = False


@dataclass(frozen=True)
class Windows:
    """The windows of a chunk of samples, row ``i`` for its ``i``-th sample.

    Attributes:
        boxes: float64 ``(n, 4)``, each ``(x0, y0, x1, y1)`` in source pixels.
        height, width: int64 ``(n,)``, the output size of each (as :class:`Window`'s).
        flips: bool ``(n,)``, whether to mirror each left-right.
    """

    boxes: np.ndarray
    height: np.ndarray
    width: np.ndarray
    flips: np.ndarray

    def __len__(self) -> int:
        return int(self.flips.shape[0])

    def __getitem__(self, i: int) -> Window:
        """Row ``i`` as a :class:`Window` (what the scalar form gives for that sample)."""
        x0, y0, x1, y1 = (float(v) for v in self.boxes[i])
        return Window((x0, y0, x1, y1), int(self.height[i]), int(self.width[i]), bool(self.flips[i]))
