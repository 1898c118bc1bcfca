"""A transform recipe: geometric ops, an optional flip, an optional output op (fused into
one resample per image), then any user callables (run per sample on the result)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from .geometry import CenterCrop, GeometricOp, RandomHorizontalFlip, RandomResizedCrop, Resize, View, Window
from .output import Normalize, OutputSpec, ToDtype


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

    Attributes:
        size: (height, width) every output has, or None when it varies per image (no
            crop and no fixed ``Resize((h, w))`` last) or user callables follow.
        fused_size: the size of the fused part's output (what callables receive), or None.
        output: the fused part's :class:`OutputSpec`, or None for uint8 output.
        callables: the user callables (and output ops) after the fused part, in order.
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

    def window(self, height: int, width: int, rng: random.Random) -> Window:
        """Choose the crop window for an image of ``height x width`` (from its header).

        ``rng`` is a :class:`random.Random`: seeding one costs a few microseconds and a
        draw a tenth of one, against 8 and 1 for a NumPy Generator, and this runs once
        per sample holding the GIL."""
        view = View.of_image(height, width)
        for op in self.geometry:
            view = op.apply(view, rng)
        flip = self.flip_p > 0 and rng.random() < self.flip_p
        return Window(view.box, view.height, view.width, flip)

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
        return self.flip_p > 0 or any(isinstance(op, RandomResizedCrop) for op in self.geometry)

    def __repr__(self) -> str:
        return "Compose([" + ", ".join(map(repr, self.ops)) + "])"
