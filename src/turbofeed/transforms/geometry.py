"""Geometric transforms composed into one crop window, chosen from the image header.

Every geometric op maps a *view* (a box in source pixel coordinates and the size the
view has at this point of the pipeline) to a new view. ``Resize(256)`` then
``CenterCrop(224)`` therefore ends as one box of the source image and one output
size, so the image is resampled once, and the box is known before decoding (the
decoder may skip what lies outside it).

Each op has a scalar form, :meth:`GeometricOp.apply` (one :class:`View`, pure Python),
and an array form, :meth:`GeometricOp.apply_many` (a chunk's :class:`Views`, a fixed
number of NumPy operations whatever its length). The two give the same bits: they do
the same IEEE operations (``+ - * /``, ``sqrt``, round-half-even) in the same order,
and the one transcendental step, RandomResizedCrop's ``exp`` of the log-ratio, reads
tables both forms share. Random ops read uniforms from fixed columns of the sample's
draws (:mod:`turbofeed.transforms.draws`), so both forms consume the same numbers.

Parameter semantics follow torchvision (``RandomResizedCrop.get_params``, integer
crop offsets, ``round`` for centre crops), so recipes port unchanged.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .draws import Uniforms
from .views import View, Views, Window, Windows, rows

__all__ = ["CenterCrop", "GeometricOp", "RandomHorizontalFlip", "RandomResizedCrop", "Resize", "View", "Views",
           "Window", "Windows", "check_size"]


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
    """Base of the ops that move the view.

    Subclasses implement :meth:`apply` (one view) and may implement :meth:`apply_many`
    (a chunk of views, same results bit for bit); an op without its own
    ``apply_many`` makes :attr:`Compose.vectorized <turbofeed.transforms.Compose>`
    False, and windows are then chosen per sample. A random op sets :attr:`columns`
    and reads ``draws[0] .. draws[columns - 1]``: uniforms in ``[0, 1)`` of the sample
    (the same columns of the same sample are the same numbers, in either form).

    Attributes:
        columns: how many uniforms the op reads per sample (0: not random).
    """

    columns: int = 0

    def apply(self, view: View, draws: Uniforms) -> View:
        raise NotImplementedError(f"{type(self).__name__} must implement apply()")

    def apply_many(self, views: Views, draws: np.ndarray) -> Views:
        """The array form of :meth:`apply` for ``n`` views: ``draws`` is float64
        ``(n, columns)``, row ``i`` what :meth:`apply` reads for view ``i``."""
        raise NotImplementedError(f"{type(self).__name__} has no apply_many(): windows are chosen per sample")

    @property
    def vectorized(self) -> bool:
        """True when this op's own class (or a subclass of it) gives :meth:`apply_many`,
        so that a subclass overriding only :meth:`apply` is not vectorised by its parent's
        array form."""
        def owner(name: str) -> type:
            return next(c for c in type(self).__mro__ if name in c.__dict__)
        many = owner("apply_many")
        return many is not GeometricOp and issubclass(many, owner("apply"))


class Resize(GeometricOp):
    """Resize to ``size``: an int sets the shorter side (aspect kept, torchvision's
    truncation of the longer side); ``(height, width)`` sets both."""

    def __init__(self, size: int | tuple[int, int]) -> None:
        self.size = check_size("Resize", size)
        if not isinstance(self.size, int):
            self._extent = np.array(self.size[::-1], np.int64).reshape(2, 1)  # (width, height)

    def apply(self, view: View, draws: Uniforms) -> View:
        if isinstance(self.size, int):
            h, w = view.height, view.width
            short, long = (h, w) if h <= w else (w, h)
            # float(size) * long / short as the array form computes it (exact below 2**53)
            new_short, new_long = self.size, int(float(self.size) * long / short)
            h, w = (new_short, new_long) if view.height <= view.width else (new_long, new_short)
        else:
            h, w = self.size
        return View(view.box, h, w)

    def apply_many(self, views: Views, draws: np.ndarray) -> Views:
        if not isinstance(self.size, int):
            return Views(views.boxes, self._extent)
        # Each side scaled as if it were the long one: float(size) * long / short, as
        # apply() computes it, for the long side; for the short side it is below
        # ``size`` (by size / short, far above a rounding), so the larger of it and
        # ``size`` is ``size`` there and the long side's value on the other.
        sizes = views.sizes
        scaled = (float(self.size) * sizes / sizes[::-1]).astype(np.int64)
        return Views(views.boxes, np.maximum(scaled, self.size))

    def __repr__(self) -> str:
        return f"Resize({self.size!r})"


class CenterCrop(GeometricOp):
    """Crop the centre ``size`` (int or (height, width)).

    A view smaller than the crop is cropped to what exists and later resized up to
    ``size`` (torchvision would pad with zeros instead).
    """

    def __init__(self, size: int | tuple[int, int]) -> None:
        self.size = _pair("CenterCrop", size)
        self._extent = np.array(self.size[::-1], np.int64).reshape(2, 1)  # (width, height)

    def apply(self, view: View, draws: Uniforms) -> View:
        ch, cw = self.size
        h, w = min(ch, view.height), min(cw, view.width)
        top = int(round((view.height - h) / 2.0))  # round half to even, as np.rint
        left = int(round((view.width - w) / 2.0))
        return View(view.sub_box(top, left, h, w), ch, cw)

    def apply_many(self, views: Views, draws: np.ndarray) -> Views:
        extents = np.minimum(views.sizes, self._extent)
        offsets = (views.sizes - extents) / 2.0  # as apply(): rounded half to even
        np.rint(offsets, out=offsets)
        return views.sub(offsets, extents, self._extent)

    def __repr__(self) -> str:
        return f"CenterCrop({self.size!r})"


_RATIO_BITS = 24  # torchvision draws the log-ratio as a float32: 24 bits
_LOW_BITS = 12
_LOW_MASK = (1 << _LOW_BITS) - 1


class RandomResizedCrop(GeometricOp):
    """Crop a random area and aspect ratio, then resize to ``size``.

    torchvision's ``get_params`` with fixed draw columns: attempt ``i`` (of 10) takes
    its area fraction from column ``i`` and its log-ratio from column ``10 + i``; the
    first crop that fits gets ``top = floor(u20 * (height - h + 1))`` and ``left =
    floor(u21 * (width - w + 1))`` (``randrange``'s uniform integer offsets); when none
    fits, the centred crop with the ratio clamped into range (torchvision's fallback).
    The log-ratio ``x`` is uniform on 2**24 steps of its range (torchvision draws it as
    a float32, 24 bits too) and ``aspect = exp(x)`` is a product of two 4096-entry
    tables made once per op with ``math.exp``, so the scalar and array forms agree to
    the bit (NumPy's SIMD ``exp`` may differ from ``math.exp`` in the last place).

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

    ATTEMPTS = 10
    columns = 2 * ATTEMPTS + 2

    def __init__(self, size: int | tuple[int, int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> None:
        self.size = _pair("RandomResizedCrop", size)
        self.scale = _range("RandomResizedCrop", "scale", scale)
        self.ratio = _range("RandomResizedCrop", "ratio", ratio)
        low, span = math.log(self.ratio[0]), math.log(self.ratio[1]) - math.log(self.ratio[0])
        steps, fine = 1 << (_RATIO_BITS - _LOW_BITS), 1 << _RATIO_BITS
        # x = low + span * q / 2**24: exp(x) = high[q >> 12] * low[q & 4095] (math.exp here only)
        self._high = np.array([math.exp(low + span * (i / steps)) for i in range(steps)], np.float64)
        self._low = np.array([math.exp(span * (j / fine)) for j in range(1 << _LOW_BITS)], np.float64)
        self._high_list: list[float] = self._high.tolist()  # the same floats, for the scalar form
        self._low_list: list[float] = self._low.tolist()
        self._extent = np.array(self.size[::-1], np.int64).reshape(2, 1)  # (width, height)

    def exp_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """The two tables ``exp`` of the log-ratio is read from (4096 float64 each, made
        with ``math.exp``): ``aspect = high[q >> 12] * low[q & 4095]`` for the ratio's
        24-bit draw ``q``; the native form (:mod:`turbofeed.transforms.program`) reads them too."""
        return self._high, self._low

    def params(self, height: int, width: int, draws: Uniforms) -> tuple[int, int, int, int]:
        """torchvision's ``get_params`` from this op's columns of ``draws``:
        (top, left, crop height, crop width)."""
        a = self.ATTEMPTS
        area = float(height) * float(width)
        low, span = self.scale[0], self.scale[1] - self.scale[0]
        for i in range(a):
            target_area = area * (low + span * draws[i])
            q = int(draws[a + i] * (1 << _RATIO_BITS))
            aspect = self._high_list[q >> _LOW_BITS] * self._low_list[q & _LOW_MASK]
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = int(draws[2 * a] * (height - h + 1))
                left = int(draws[2 * a + 1] * (width - w + 1))
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

    def params_many(self, sizes: np.ndarray, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`params` of ``n`` images: ``sizes`` int64 ``(2, n)`` or ``(2, 1)`` (rows
        width, height), ``draws`` float64 ``(n, columns)`` -> (offsets, extents), float64
        ``(2, n)`` of whole numbers (rows left, top and crop width, crop height). The ten
        attempts are ``(10, n)`` arrays; the fallback runs only when some image needs it.
        Fastest when ``draws.T`` is contiguous, as :func:`~turbofeed.transforms.uniforms`
        makes it."""
        a = self.ATTEMPTS
        d = draws.T  # (columns, n)
        limits = sizes.astype(np.float64)
        target = (self.scale[1] - self.scale[0]) * d[:a]
        target += self.scale[0]
        target *= limits[0] * limits[1]  # area * (low + span * u), as params()
        q = (d[a:2 * a] * float(1 << _RATIO_BITS)).astype(np.int64)
        aspect = self._high[q >> _LOW_BITS]
        aspect *= self._low[q & _LOW_MASK]
        n = d.shape[1]
        crop = np.empty((2, a, n), np.float64)  # (w, h) of every attempt
        np.multiply(target, aspect, out=crop[0])
        np.divide(target, aspect, out=crop[1])
        np.sqrt(crop, out=crop)
        np.rint(crop, out=crop)
        inside = crop >= 1.0
        inside &= crop <= limits[:, None, :]
        fits = inside[0] & inside[1]
        first = fits.argmax(axis=0)  # the first attempt that fits (0 when none does)
        images = rows(n)
        extents = crop[:, first, images]
        offsets = limits - extents
        offsets += 1.0
        offsets *= d[2 * a + 1:2 * a - 1:-1]  # left from column 21, top from 20
        np.floor(offsets, out=offsets)
        found = fits[first, images]
        if not found.all():  # torchvision's fallback: rare, so only for the images that need it
            miss = ~found
            limits = np.broadcast_to(limits, (2, n))
            width, height = limits[0, miss], limits[1, miss]
            in_ratio = width / height
            extents[0, miss] = np.where(in_ratio > self.ratio[1], np.rint(height * self.ratio[1]), width)
            extents[1, miss] = np.where(in_ratio < self.ratio[0], np.rint(width / self.ratio[0]), height)
            offsets[:, miss] = np.floor((limits[:, miss] - extents[:, miss]) / 2)
        return offsets, extents

    def apply(self, view: View, draws: Uniforms) -> View:
        top, left, h, w = self.params(view.height, view.width, draws)
        return View(view.sub_box(top, left, h, w), *self.size)

    def apply_many(self, views: Views, draws: np.ndarray) -> Views:
        offsets, extents = self.params_many(views.sizes, draws)
        return views.sub(offsets, extents, self._extent)

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
