"""Counter-based random draws: uniform floats as a pure function of (seed, epoch, gid, k).

A sample's random crop and flip come from a few uniforms in ``[0, 1)``, numbered by a
*column* ``k`` (each op owns fixed columns, :class:`~turbofeed.transforms.Compose`
lays them out). Draw ``k`` of sample ``gid`` is::

    key = mix(mix(mix(seed + G) ^ epoch) ^ gid)       # per sample, 64-bit
    z   = mix(key + (k + 1) * G)                      # splitmix64's (k+1)-th output
    u   = (z >> 11) * 2**-53                          # 53-bit float in [0, 1)

with ``G = 0x9E3779B97F4A7C15``, all arithmetic modulo 2**64 (seed, epoch and gid are
taken modulo 2**64 first: -1 is 2**64 - 1) and ``mix`` splitmix64's finaliser. So a
draw is a pure function of its four numbers: it does not depend on the thread that
asks, on the chunk the sample is in, on the other samples of the chunk, nor on the order
or the number of draws made before. The scalar form (:class:`Draws`, pure Python, for
one sample) and the array form (:func:`uniforms`, NumPy, for a chunk) give the same
float64 bits: both compute the same integers exactly and convert a 53-bit integer,
which is exact.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import numpy as np

_M = 0xFFFF_FFFF_FFFF_FFFF
_G = 0x9E37_79B9_7F4A_7C15  # 2**64 / golden ratio, splitmix64's increment
_C1 = 0xBF58_476D_1CE4_E5B9
_C2 = 0x94D0_49BB_1331_11EB
_UNIT = 2.0 ** -53


class Uniforms(Protocol):
    """What a geometric op reads its draws from: ``draws[k]``, a float in ``[0, 1)``,
    for the op's own column ``k`` (a :class:`Draws`, or a row of :func:`uniforms`)."""

    def __getitem__(self, k: int, /) -> float: ...


def mix(z: int) -> int:
    """splitmix64's finaliser: a bijection of 64-bit integers that scatters every bit."""
    z = ((z ^ (z >> 30)) * _C1) & _M
    z = ((z ^ (z >> 27)) * _C2) & _M
    return z ^ (z >> 31)


@lru_cache(maxsize=256)
def epoch_key(seed: int, epoch: int) -> int:
    """The part of every key of one (seed, epoch) (cached: computed once per epoch)."""
    return mix(mix((seed + _G) & _M) ^ (epoch & _M))


class Draws:
    """The draws of one sample: ``Draws(seed, epoch, gid)[k]`` is its uniform of column
    ``k``, a float in ``[0, 1)``, pure Python (a draw costs well under a microsecond and
    only the columns asked for are computed). ``draws.shifted(first)[k]`` is column
    ``first + k`` (how :class:`~turbofeed.transforms.Compose` hands an op its columns).

    Equals ``uniforms(seed, epoch, [gid], n)[0, k]`` bit for bit.
    """

    __slots__ = ("key", "first")

    def __init__(self, seed: int, epoch: int, gid: int) -> None:
        self.key = mix(epoch_key(seed, epoch) ^ (gid & _M))
        self.first = 0

    def shifted(self, first: int) -> "Draws":
        """These draws with column ``first`` as column 0."""
        draws = Draws.__new__(Draws)
        draws.key, draws.first = self.key, self.first + first
        return draws

    def __getitem__(self, k: int) -> float:
        z = (self.key + (self.first + k + 1) * _G) & _M
        z = ((z ^ (z >> 30)) * _C1) & _M
        z = ((z ^ (z >> 27)) * _C2) & _M
        return ((z ^ (z >> 31)) >> 11) * _UNIT

    def __repr__(self) -> str:
        return f"Draws(key={self.key:#018x}, first={self.first})"


_OFFSETS: dict[int, np.ndarray] = {}


def _offsets(columns: int) -> np.ndarray:
    """``(k + 1) * G mod 2**64`` for each column, uint64 (cached per column count)."""
    offsets = _OFFSETS.get(columns)
    if offsets is None:
        offsets = np.array([((k + 1) * _G) & _M for k in range(columns)], np.uint64)
        _OFFSETS[columns] = offsets
    return offsets


def _mix_inplace(z: np.ndarray) -> np.ndarray:
    """:func:`mix` of a uint64 array, in place (uint64 arrays wrap modulo 2**64)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_C1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_C2)
    z ^= z >> np.uint64(31)
    return z


def uniforms(seed: int, epoch: int, gids: np.ndarray, columns: int) -> np.ndarray:
    """The draws of many samples at once.

    Args:
        seed, epoch: Python ints (any size: taken modulo 2**64).
        gids: sample ids, an int64 (or uint64) array of shape ``(n,)``.
        columns: draws per sample.

    Returns:
        float64 array ``(n, columns)`` in ``[0, 1)``: row ``i`` column ``k`` is
        ``Draws(seed, epoch, gids[i])[k]``, bit for bit. Column-major (its ``.T`` is
        C-contiguous), so that a column, or a block of them, is contiguous for the ops.
        A fixed number of NumPy operations whatever ``n``.
    """
    gids = np.asarray(gids)
    if gids.dtype != np.uint64:
        gids = gids.astype(np.int64, copy=False).view(np.uint64)  # two's complement: gid mod 2**64
    keys = _mix_inplace(gids ^ np.uint64(epoch_key(seed, epoch)))
    z = _mix_inplace(_offsets(columns)[:, None] + keys)  # (columns, n): each column contiguous
    z >>= np.uint64(11)
    out = z.astype(np.float64)
    out *= _UNIT
    return out.T
