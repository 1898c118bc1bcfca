"""A :class:`~turbofeed.transforms.Compose`'s geometric ops as a program of numbers, for
the native windows of a chunk (``turbofeed.decode._crop.windows``, ``csrc/windows.c``).

The pure Python form (:meth:`Compose.window`) runs once per sample holding the GIL; the
NumPy form (:meth:`Compose.windows`) runs about 75 NumPy calls per chunk, 150-200 us on
a slow core. The native form runs the ops of ``windows.c`` on each sample's draws
without the GIL in about 1 us per sample, with the same floating-point operations in
the same order as the Python form, so all three give the same windows to the bit
(tests/decode/test_native_windows.py).

The layout is ``csrc/windows.h``'s: ``[version, op count, flip column (-1: none), flip
p]``, then :data:`OP_WORDS` numbers per op (its code and arguments), then the
RandomResizedCrop tables of ``exp`` the Python form reads too. Only the ops below have a
native form (exactly these classes, not subclasses, whose ``apply`` may differ); a
Compose with any other geometric op (``BucketResize``, your own) has no program.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .geometry import CenterCrop, RandomResizedCrop, Resize

if TYPE_CHECKING:
    from .compose import Compose

VERSION = 1
OP_WORDS = 10
RESIZE_SHORT, RESIZE, CENTER_CROP, RRC = 1, 2, 3, 4


def program(compose: Compose) -> np.ndarray | None:
    """The float64 program of ``compose``'s geometric ops and flip, or None when one of
    its ops has no native form."""
    head = [float(VERSION), float(len(compose.geometry)),
            -1.0 if compose.flip_column is None else float(compose.flip_column), float(compose.flip_p)]
    ops: list[list[float]] = []
    tables: list[np.ndarray] = []
    at = len(head) + OP_WORDS * len(compose.geometry)  # where the tables start
    for op, first in zip(compose.geometry, compose.firsts):
        kind = type(op)
        words: list[float]
        if kind is Resize:
            assert isinstance(op, Resize)
            words = [RESIZE_SHORT, op.size] if isinstance(op.size, int) else [RESIZE, *op.size]
        elif kind is CenterCrop:
            assert isinstance(op, CenterCrop)
            words = [CENTER_CROP, *op.size]
        elif kind is RandomResizedCrop:
            assert isinstance(op, RandomResizedCrop)
            high, low = op.exp_tables()
            words = [RRC, *op.size, *op.scale, *op.ratio, first, at]
            tables += [high, low]
            at += len(high) + len(low)
        else:
            return None
        ops.append([float(w) for w in words] + [0.0] * (OP_WORDS - len(words)))
    return np.concatenate([np.array(head + sum(ops, []), np.float64), *tables])
