"""A transform recipe: geometric ops, an optional flip, an optional output op."""

from __future__ import annotations

import random
from collections.abc import Sequence

from .geometry import CenterCrop, GeometricOp, RandomHorizontalFlip, RandomResizedCrop, Resize, View, Window
from .output import Normalize, OutputSpec, ToDtype


class Compose:
    """An ordered list of turbofeed transforms, applied as one resample per image.

    Geometric ops (:class:`Resize`, :class:`CenterCrop`, :class:`RandomResizedCrop`)
    and :class:`RandomHorizontalFlip` may come in any order; :class:`Normalize` or
    :class:`ToDtype` may only come last. Example::

        Compose([Resize(256), CenterCrop(224), Normalize()])  # float32 (3, 224, 224)

    Attributes:
        size: (height, width) every output has, or None when it varies per image
            (no crop and no fixed ``Resize((h, w))`` last).
        output: the :class:`OutputSpec`, or None for uint8 output.
    """

    def __init__(self, ops: Sequence[object]) -> None:
        self.ops = list(ops)
        self.geometry: list[GeometricOp] = []
        self.flip_p = 0.0
        self.output: OutputSpec | None = None
        size: tuple[int, int] | None = None
        for i, op in enumerate(self.ops):
            if isinstance(op, (Normalize, ToDtype)):
                if i != len(self.ops) - 1:
                    raise ValueError(f"{op!r} must be the last transform")
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
            else:
                raise TypeError(f"{op!r} is not a turbofeed transform; use the ops of "
                                "turbofeed.transforms (they run in one resample per image)")
        self.size = size

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
        """The same ops without the final ``Normalize``/``ToDtype``: uint8 output, for a
        caller that converts on the device instead."""
        return self if self.output is None else Compose(self.ops[:-1])

    @property
    def random(self) -> bool:
        return self.flip_p > 0 or any(isinstance(op, RandomResizedCrop) for op in self.geometry)

    def __repr__(self) -> str:
        return "Compose([" + ", ".join(map(repr, self.ops)) + "])"
