"""Aspect-ratio buckets: every batch of an epoch drawn from the images of one bucket.

Pure arithmetic over each sample's (height, width) (from the dataset index) and
(seed, epoch, world_size, batch_size, drop_last). A bucket is an output size
``(height, width)``; an image falls in the bucket whose aspect ratio is nearest its own
on a log scale (the thresholds are the geometric means of neighbouring ratios; an image
of unknown size, ``0 x 0``, counts as square).

The epoch's global order is cut into *global batches* of ``batch_size * world_size``
samples, each from one bucket; with the strided rank split of
:func:`~turbofeed.plan.order.rank_order`, batch ``k`` of every rank comes from global
batch ``k``, so every rank's batch ``k`` holds one bucket (the same on every rank) and
every rank takes the same number of batches. Bucket ``b``'s samples (shuffled) fill
``n_b`` global batches; its last partial one is dropped (``drop_last``) or completed
with samples of the same bucket from its start (wrap-around, as the rank split pads)::

    bucket 0 (square)   a0 a1 a2 a3 a4 | a5 a6 a7 a0 a1     <- padded with a0 a1
    bucket 1 (wide)     c0 c1 c2 c3 c4                       (global batch of 5)
    epoch (shuffled)    [c0..c4] [a5 a6 a7 a0 a1] [a0..a4]
    W=1, b=5 -> rank 0: batch 0 = c*, batch 1 = a*, batch 2 = a*

The order of global batches is a permutation drawn from ``(seed, epoch)``: resume at
``samples_done`` (a whole number of global batches) continues it exactly, with the same
world size and batch size (the cut depends on both: the loader's plan fingerprint holds
them, so another world size is refused).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: SDXL's training resolutions near 1024x1024 pixels, as (height, width).
SDXL = ((1024, 1024), (1152, 896), (896, 1152), (1216, 832), (832, 1216), (1344, 768), (768, 1344),
        (1536, 640), (640, 1536))
_SALT = 0x6275636B  # "buck": the order of global batches is not the plain epoch permutation


@dataclass(frozen=True)
class Buckets:
    """A set of aspect-ratio buckets.

    Attributes:
        sizes: each bucket's output ``(height, width)``, sorted by aspect ratio (w / h).
    """

    sizes: tuple[tuple[int, int], ...]

    @classmethod
    def make(cls, spec: str | Sequence, *, area: int = 1024 * 1024, multiple: int = 64) -> "Buckets":
        """Buckets from ``spec``: ``"aspect"`` (SDXL's nine, near 1024x1024), a list of
        ``(height, width)``, or a list of aspect ratios (width / height) each sized to
        about ``area`` pixels, sides a multiple of ``multiple``.

        Raises:
            ValueError: an empty list, a size that is not two positive ints, a ratio <= 0,
                or two buckets of one aspect ratio.
        """
        if isinstance(spec, str):
            if spec != "aspect":
                raise ValueError(f'buckets={spec!r}: use "aspect", a list of (height, width) or of ratios')
            sizes = list(SDXL)
        else:
            sizes = [cls._size(item, area, multiple) for item in spec]
        if not sizes:
            raise ValueError("buckets: an empty list")
        sizes.sort(key=lambda hw: hw[1] / hw[0])
        ratios = [w / h for h, w in sizes]
        if len(set(ratios)) != len(ratios):
            raise ValueError(f"buckets {sizes}: two buckets have one aspect ratio")
        return cls(tuple(sizes))

    @staticmethod
    def _size(item: object, area: int, multiple: int) -> tuple[int, int]:
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            if item <= 0:
                raise ValueError(f"buckets: aspect ratio {item!r} is not > 0")
            h = math.sqrt(area / item)
            return (max(multiple, round(h / multiple) * multiple),
                    max(multiple, round(h * item / multiple) * multiple))
        if (isinstance(item, (tuple, list)) and len(item) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in item)):
            return int(item[0]), int(item[1])
        raise ValueError(f"buckets: {item!r} is neither (height, width) of positive ints nor a ratio")

    @property
    def bounds(self) -> list[float]:
        """The ratios (w / h) between neighbouring buckets: geometric means."""
        ratios = [w / h for h, w in self.sizes]
        return [math.sqrt(a * b) for a, b in zip(ratios, ratios[1:])]

    def of(self, height: int, width: int) -> int:
        """The bucket of one image (the same as :meth:`assign` gives: Python and NumPy
        divide alike, and both compare against :attr:`bounds`)."""
        ratio = width / height if height > 0 and width > 0 else 1.0
        return bisect.bisect_right(self.bounds, ratio)

    def assign(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        """The bucket of each image: int64 array of ``len(heights)``."""
        h, w = np.asarray(heights, np.float64), np.asarray(widths, np.float64)
        known = (h > 0) & (w > 0)
        ratio = np.divide(w, h, out=np.ones_like(h), where=known)
        return np.searchsorted(np.array(self.bounds, np.float64), ratio, side="right").astype(np.int64)

    def __len__(self) -> int:
        return len(self.sizes)


def bucket_counts(groups: np.ndarray, count: int) -> np.ndarray:
    """int64 samples per bucket (``count`` buckets)."""
    return np.bincount(np.asarray(groups, np.int64), minlength=count).astype(np.int64)


def bucketed_size(counts: np.ndarray, *, batch_size: int, world_size: int, drop_last: bool) -> int:
    """Length of the global order :func:`bucket_order` returns (a multiple of
    ``batch_size * world_size``)."""
    g = batch_size * world_size
    c = np.asarray(counts, np.int64)
    chunks = c // g if drop_last else -(-c // g)
    return int(chunks.sum()) * g


def bucket_order(groups: np.ndarray, *, batch_size: int, world_size: int, seed: int, epoch: int,
                 shuffle: bool, drop_last: bool) -> np.ndarray:
    """The epoch's global order (see the module docstring).

    Args:
        groups: int64 bucket of each sample id (``len`` = the dataset's samples).

    Returns:
        int64 array of :func:`bucketed_size` sample ids; each run of
        ``batch_size * world_size`` from one bucket. Same arguments -> same array.
    """
    g = batch_size * world_size
    groups = np.asarray(groups, np.int64)
    rng = np.random.default_rng([seed, epoch, _SALT])
    by_bucket = np.argsort(groups, kind="stable")
    edges = np.searchsorted(groups[by_bucket], np.arange(int(groups.max(initial=-1)) + 2))
    chunks = []
    for b in range(len(edges) - 1):
        ids = by_bucket[edges[b]:edges[b + 1]]
        if len(ids) == 0:
            continue
        if shuffle:
            ids = rng.permutation(ids)
        if drop_last:
            ids = ids[:len(ids) // g * g]
        elif len(ids) % g:
            ids = np.concatenate([ids, np.resize(ids, g - len(ids) % g)])  # wrap-around in the bucket
        chunks.append(ids.reshape(-1, g))
    if not chunks:
        return np.zeros(0, np.int64)
    table = np.concatenate(chunks)
    if shuffle:
        table = table[rng.permutation(len(table))]
    return table.reshape(-1).astype(np.int64, copy=False)
