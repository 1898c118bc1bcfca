"""A transform recipe: geometric ops, an optional flip, an optional output op (fused into
one resample per image), then any user callables (run per sample on the result)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .draws import Draws, Uniforms, uniforms
from .geometry import CenterCrop, GeometricOp, RandomHorizontalFlip, RandomResizedCrop, Resize
from .output import Normalize, OutputSpec, ToDtype
from .program import program
from .views import View, Views, Window, Windows


def is_turbofeed_op(op: object) -> bool:
    """True for the ops fused into the native resample (geometry, flip, output op)."""
    return isinstance(op, (GeometricOp, RandomHorizontalFlip, Normalize, ToDtype))


class Compose:
    """An ordered list of transforms: turbofeed's own ops first, applied as one resample
    per image, then any callables of your own.

    Geometric ops (:class:`Resize`, :class:`CenterCrop`, :class:`RandomResizedCrop`)
    and :class:`RandomHorizontalFlip` may come in any order, then :class:`Normalize` or
    :class:`ToDtype`; these are fused into the decode. After them may come any callables
    (a torchvision v2 transform, a function of a (3, H, W) tensor): they run in the worker
    threads, in order, on each sample's tensor (uint8 unless an output op came before
    them), and ``Normalize``/``ToDtype`` among them run as torch ops. Examples::

        Compose([Resize(256), CenterCrop(224), Normalize()])        # float32 (3, 224, 224)
        Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
                 torchvision.transforms.v2.ColorJitter(0.4, 0.4), Normalize()])

    Batches whose samples all have one shape are stacked; with callables that change
    shapes per sample, a batch is a list.

    The random choices of a sample come from its counter-based draws
    (:mod:`turbofeed.transforms.draws`, a pure function of ``(seed, epoch, sample id,
    column)``): each random geometric op reads its own fixed columns, in order, the flip
    one column after them. :meth:`window` chooses one sample's window (pure Python),
    :meth:`windows` a whole chunk's (NumPy), with the same bits.

    Attributes:
        size: (height, width) every output has, or None when it varies per image (no
            crop and no fixed ``Resize((h, w))`` last) or user callables follow.
        fused_size: the size of the fused part's output (what callables receive), or None.
        output: the fused part's :class:`OutputSpec`, or None for uint8 output.
        callables: the user callables (and output ops) after the fused part, in order.
        columns: draws per sample (RandomResizedCrop 22, the flip 1, the others 0).
        firsts: the first column of each op of ``geometry``, in order.
        flip_column: the flip's column, or None when nothing flips.
        vectorized: every geometric op has an array form (:meth:`windows` then runs a
            fixed number of NumPy operations per chunk; otherwise one :meth:`window`
            per sample, and callers may as well go per sample).
    """

    def __init__(self, ops: Sequence[object] | Callable[[Any], Any]) -> None:
        if callable(ops) and not isinstance(ops, Sequence):
            ops = [ops]  # transform=my_function
        self.ops = list(ops)
        self.geometry: list[GeometricOp] = []
        self.flip_p = 0.0
        self.output: OutputSpec | None = None
        self.callables: list[Callable[[Any], Any]] = []
        size: tuple[int, int] | None = None
        fused = next((i for i, op in enumerate(self.ops) if not is_turbofeed_op(op)), len(self.ops))
        for op in self.ops[fused:]:
            if isinstance(op, (GeometricOp, RandomHorizontalFlip)):
                raise ValueError(f"{op!r} comes after the callable {self.ops[fused]!r}: turbofeed's "
                                 "geometric ops are fused into the decode, so they must come first")
            if not callable(op):
                raise TypeError(f"{op!r} is not a turbofeed transform nor a callable; use the ops of "
                                "turbofeed.transforms (they run in one resample per image) or a function")
            self.callables.append(op)
        for i, op in enumerate(self.ops[:fused]):
            if isinstance(op, (Normalize, ToDtype)):
                if i != fused - 1:
                    raise ValueError(f"{op!r} must be the last of turbofeed's own ops (callables may follow)")
                self.output = op.spec
            elif isinstance(op, RandomHorizontalFlip):
                # flipped iff an odd number of flips fire: two certain flips cancel
                self.flip_p = self.flip_p + op.p - 2 * self.flip_p * op.p
            elif isinstance(op, GeometricOp):
                self.geometry.append(op)
                if isinstance(op, (CenterCrop, RandomResizedCrop)):
                    size = op.size
                elif isinstance(op, Resize):
                    size = None if isinstance(op.size, int) else op.size
        self.fused_size = size
        self.size = None if self.callables else size
        self.firsts: list[int] = []
        columns = 0
        for op in self.geometry:
            self.firsts.append(columns)
            columns += op.columns
        self.flip_column = columns if self.flip_p > 0 else None
        self.columns = columns + (self.flip_column is not None)
        self.vectorized = all(op.vectorized for op in self.geometry)
        self._steps = list(zip(self.geometry, self.firsts))
        #: the geometric ops and flip as numbers for the native windows of a chunk
        #: (:mod:`turbofeed.transforms.program`), or None when an op has no native form
        self.program = program(self)

    def window(self, height: int, width: int, draws: Uniforms) -> Window:
        """Choose the crop window for an image of ``height x width`` (from its header).

        Args:
            draws: the sample's draws, ``Draws(seed, epoch, sample id)`` (or any
                ``draws[k]`` in ``[0, 1)`` for ``k < columns``; unused when not
                :attr:`random`). Pure Python: this runs once per sample holding the GIL.

        Returns:
            The same window as row ``i`` of :meth:`windows` for that sample, to the bit.
        """
        if isinstance(draws, random.Random):
            raise TypeError("Compose.window takes the sample's draws, turbofeed.transforms.Draws(seed, epoch, "
                            "sample id), not a random.Random (crops come from a counter-based generator)")
        view = View.of_image(height, width)
        for op, first in self._steps:
            view = op.apply(view, draws if first == 0 or not op.columns else _shifted(draws, first))
        flip = self.flip_column is not None and draws[self.flip_column] < self.flip_p
        return Window(view.box, view.height, view.width, flip)

    def windows(self, heights: Any, widths: Any, seed: int, epoch: int, gids: Any) -> Windows:
        """Choose the crop windows of a chunk of samples at once.

        Args:
            heights, widths: the images' sizes (from their headers), int arrays ``(n,)``,
                each >= 1.
            seed, epoch: the loader's seed and the epoch.
            gids: the samples' ids, int64 ``(n,)``: sample ``gids[i]`` gets the window
                ``window(heights[i], widths[i], Draws(seed, epoch, gids[i]))`` would
                give, bit for bit, whatever else is in the chunk.

        Returns:
            :class:`Windows` of ``n`` rows. With :attr:`vectorized` a fixed number of
            NumPy operations whatever ``n``; else a loop of :meth:`window`.

        Raises:
            ValueError: lengths differ, or a size below 1.
        """
        views = Views.of_images(heights, widths)
        n = len(views)
        ids = np.asarray(gids).reshape(-1)
        if ids.shape[0] != n:
            raise ValueError(f"{ids.shape[0]} sample ids for {n} image sizes")
        if not self.vectorized:
            return self._windows_per_sample(views, seed, epoch, ids)
        draws = uniforms(seed, epoch, ids, self.columns) if self.columns else np.empty((n, 0), np.float64)
        for op, first in self._steps:
            views = op.apply_many(views, draws[:, first:first + op.columns])
        if self.flip_column is None:
            flips = np.zeros(n, bool)
        else:
            flips = draws[:, self.flip_column] < self.flip_p
        sizes = views.sizes if views.sizes.shape[1] == n else views.sizes.repeat(n, axis=1)
        return Windows(np.ascontiguousarray(views.boxes.T), sizes[1], sizes[0], flips)

    def _windows_per_sample(self, views: Views, seed: int, epoch: int, ids: np.ndarray) -> Windows:
        chosen = [self.window(int(views.height[i]), int(views.width[i]), Draws(seed, epoch, int(g)))
                  for i, g in enumerate(ids.tolist())]
        n = len(chosen)
        return Windows(np.array([w.box for w in chosen], np.float64).reshape(n, 4),
                       np.array([w.height for w in chosen], np.int64), np.array([w.width for w in chosen], np.int64),
                       np.array([w.flip for w in chosen], bool))

    def without_output(self) -> "Compose":
        """The same ops without the fused ``Normalize``/``ToDtype``: uint8 output, for a
        caller that converts on the device instead (no user callables: they would see
        uint8 instead of what they were written for)."""
        if self.output is None or self.callables:
            return self
        return Compose(self.ops[:-1])

    def fused(self) -> "Compose":
        """The fused part alone (what the decode does; the callables left out)."""
        return self if not self.callables else Compose(self.ops[:len(self.ops) - len(self.callables)])

    @property
    def random(self) -> bool:
        """Whether windows depend on the draws (a random op, or a flip that may fire)."""
        return self.columns > 0

    def __repr__(self) -> str:
        return "Compose([" + ", ".join(map(repr, self.ops)) + "])"


class _Offset:
    """Columns ``first, first + 1, ...`` of ``draws`` as ``0, 1, ...``."""

    __slots__ = ("draws", "first")

    def __init__(self, draws: Uniforms, first: int) -> None:
        self.draws, self.first = draws, first

    def __getitem__(self, k: int) -> float:
        return self.draws[self.first + k]


def _shifted(draws: Uniforms, first: int) -> Uniforms:
    return draws.shifted(first) if isinstance(draws, Draws) else _Offset(draws, first)
