"""An epoch's positions on Ray: which are consumed, and the ranges still to read.

The order of an epoch is a pure function of (seed, epoch, shuffle)
(:func:`turbofeed.plan.order.epoch_permutation`), so a set of positions is all a
checkpoint needs: the trainers record the positions of the samples they were given
(:class:`Consumed`), and a restart reads the epoch's order again, less those
(:func:`read_ranges`). Each sample is then delivered once per epoch however the
blocks were spread over nodes, actors and trainers, with the same or another number
of trainers. Imports no Ray: the arithmetic is tested on its own.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class Consumed:
    """The positions of one epoch delivered so far, as sorted disjoint runs
    ``[start, stop)`` (a whole epoch is one run, however it was delivered)."""

    def __init__(self, runs: Iterable[tuple[int, int]] = ()) -> None:
        self._marks = np.zeros(0, bool)
        for start, stop in runs:
            self.add(np.arange(int(start), int(stop), dtype=np.int64))

    def add(self, positions: np.ndarray) -> None:
        """Mark ``positions`` (int, >= 0) delivered."""
        positions = np.asarray(positions, np.int64)
        if not len(positions):
            return
        if positions.min() < 0:
            raise ValueError(f"positions must be >= 0, got {int(positions.min())}")
        top = int(positions.max()) + 1
        if top > len(self._marks):
            self._marks = np.concatenate([self._marks, np.zeros(top - len(self._marks), bool)])
        self._marks[positions] = True

    def mask(self, size: int) -> np.ndarray:
        """bool ``(size,)``: which of positions ``0 .. size - 1`` are consumed."""
        out = np.zeros(size, bool)
        n = min(size, len(self._marks))
        out[:n] = self._marks[:n]
        return out

    def runs(self) -> list[tuple[int, int]]:
        """The consumed positions as sorted disjoint runs ``(start, stop)``."""
        return runs_of(self._marks)

    def __len__(self) -> int:
        return int(self._marks.sum())

    def union(self, other: Consumed) -> Consumed:
        """Both sets (the trainers' states, merged on restart)."""
        out = Consumed()
        n = max(len(self._marks), len(other._marks))
        out._marks = self.mask(n) | other.mask(n)
        return out


def runs_of(marks: np.ndarray) -> list[tuple[int, int]]:
    """The runs of True in ``marks`` as ``(start, stop)`` pairs, in order."""
    edges = np.flatnonzero(np.diff(np.concatenate([[False], marks, [False]]).astype(np.int8)))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def read_ranges(size: int, consumed: Consumed, per_range: int) -> list[tuple[int, int]]:
    """The positions of an epoch of ``size`` not yet consumed, as ranges ``[start, stop)``
    of at most ``per_range`` positions each (a read task's share), in order."""
    if per_range < 1:
        raise ValueError(f"per_range must be >= 1, got {per_range}")
    out = []
    for start, stop in runs_of(~consumed.mask(size)):
        out += [(a, min(a + per_range, stop)) for a in range(start, stop, per_range)]
    return out
