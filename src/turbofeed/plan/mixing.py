"""Which samples an epoch holds, grouped by shard visit: resampling and weighted mixing.

Pure arithmetic on shard sizes: no I/O, no clock, no global random state; every draw
comes from ``default_rng([seed, epoch, _TAG, group])``. Shard ``k`` holds the global ids
``starts[k] .. starts[k+1]-1``. For shard sizes ``[3, 0, 2]`` (ids 0-2 | - | 3-4)::

    default               visits  s0:[0 1 2]  s2:[3 4]            (identity, shard order)
    epoch_size=7          visits  s2:[3 4]  s0:[0 1 2]  | s0:[0 2]      a pass + 2 (e.g.)
    resample=True         visits  s2:[3 4]  s2:[3 4]  s0:[0 1 2] ...   with replacement,
                                  each non-empty shard equally likely, last one cut
                                  (not used by the loader: a resampled epoch is drawn
                                  lazily, per position (:mod:`turbofeed.plan.resampled`)
                                  or, streamed, per round (:func:`draw_round`))

With ``groups=[0, 0, 1]`` and ``weights=[1, 3]``, an epoch of 5 samples takes quotas
``[1, 4]`` (largest remainder of 1.25 and 3.75): one sample of group 0, and group 1's 2
samples twice each (two whole passes).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .resampled import ResampledEpoch

_TAG = 0x6D6978  # "mix": keeps these draws apart from plan.order's default_rng([seed, epoch])
_ROUND_TAG = 0x726E64  # "rnd": a streamed resampled epoch's rounds (draw_round)


@dataclass(frozen=True)
class ShardVisits:
    """The samples of one epoch, grouped by the shard visit they come from.

    Attributes:
        shard: int64 ``[V]``, the shard of each visit.
        start: int64 ``[V+1]``, visit ``v`` holds ``ids[start[v]:start[v+1]]``.
        ids: int64 ``[total]``, global sample ids; an id repeats across visits only when
            resampling or a quota above the group's size needs it, never within a visit.
    """

    shard: np.ndarray
    start: np.ndarray
    ids: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def visit_of(self, position: int | np.ndarray) -> int | np.ndarray:
        """The visit holding ``ids[position]`` (vectorised over an array of positions)."""
        found = np.searchsorted(self.start, position, side="right") - 1
        return int(found) if np.ndim(found) == 0 else found

    def ids_in_order(self, visit_order: np.ndarray) -> np.ndarray:
        """The ids when visits come in ``visit_order`` (e.g. a shuffled ``arange(V)``).

        >>> v = ShardVisits(np.array([0, 2]), np.array([0, 3, 5]), np.arange(5))
        >>> v.ids_in_order(np.array([1, 0])).tolist()
        [3, 4, 0, 1, 2]
        """
        order = np.asarray(visit_order, dtype=np.int64)
        return self.ids[_ranges(self.start[order], (self.start[1:] - self.start[:-1])[order])]


def _ranges(first: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenate ``arange(first[i], first[i] + lens[i])`` over i, without a Python loop."""
    out_start = np.cumsum(lens) - lens
    return np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(first - out_start, lens)


def _cut(candidates: np.ndarray, sizes: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray]:
    """Visits (shard, length): ``candidates`` (shards in draw order, holding >= ``need``
    samples) taken until ``need`` samples, the last one shortened."""
    ends = np.cumsum(sizes[candidates])
    j = int(np.searchsorted(ends, need, side="left"))
    lens = sizes[candidates[:j + 1]].copy()
    lens[-1] = need - (int(ends[j - 1]) if j else 0)
    return candidates[:j + 1], lens


def _group_visits(shards: np.ndarray, sizes: np.ndarray, starts: np.ndarray, quota: int, resample: bool,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Visits (shard, length) and ids giving one group (``shards``, all non-empty) ``quota``."""
    if quota == 0:
        return shards[:0], shards[:0], shards[:0]
    size = int(sizes[shards].sum())
    if resample:  # shards uniformly with replacement: every sample equally often on average
        picks, got = [], 0
        while got < quota:  # draw ~10% more than the mean shard size says is needed, then cut
            picks.append(shards[rng.integers(0, len(shards), int((quota - got) * len(shards) / size * 1.1) + 8)])
            got += int(sizes[picks[-1]].sum())
        candidates = np.concatenate(picks)
    else:  # ceil(quota / size) passes, each shard once per pass in the pass's own seeded order
        candidates = rng.permuted(np.tile(shards, (-(-quota // size), 1)), axis=1).ravel()
    shard, lens = _cut(candidates, sizes, quota)
    ids = _ranges(starts[shard], lens)
    last, k = int(shard[-1]), int(lens[-1])
    if k < sizes[last]:  # the last visit: a seeded random subset of its shard
        ids[-k:] = starts[last] + np.sort(rng.choice(int(sizes[last]), k, replace=False))
    return shard, lens, ids


def quotas(weights: Sequence[float], epoch_size: int) -> list[int]:
    """Samples per group: shares of ``epoch_size`` by weight, largest-remainder rounding
    (ties to the lower group), exact in rational arithmetic; they sum to ``epoch_size``.

    >>> quotas([0.5, 0.3, 0.2], 7)   # 3.5, 2.1, 1.4 -> 3 2 1, the spare 1 to group 0
    [4, 2, 1]

    Raises:
        ValueError: no weights, one negative or not finite, all 0; ``epoch_size < 0``.
    """
    bad = [f"weights[{g}] = {x!r}" for g, x in enumerate(weights) if not (math.isfinite(x) and x >= 0)]
    if bad or not len(weights) or sum(weights) <= 0:
        why = f"{', '.join(bad)} not finite and >= 0" if bad else f"weights {list(weights)} have no positive one"
        raise ValueError(f"weights must be finite, >= 0, with a positive sum: {why}")
    if epoch_size < 0:
        raise ValueError(f"epoch_size must be >= 0, got {epoch_size}")
    w = [Fraction(float(x)) for x in weights]
    shares = [epoch_size * x / sum(w) for x in w]
    out = [math.floor(s) for s in shares]
    for g in sorted(range(len(w)), key=lambda g: (out[g] - shares[g], g))[:epoch_size - sum(out)]:
        out[g] += 1
    return out


def _group_of(sizes: np.ndarray, groups: np.ndarray | None, weights: Sequence[float] | None) -> np.ndarray:
    """Validate ``groups`` against ``weights`` (one per group); the group of each shard."""
    if weights is None:
        return np.zeros(len(sizes), dtype=np.int64)  # groups without weights: one dataset
    g = np.zeros(len(sizes), dtype=np.int64) if groups is None else np.asarray(groups)
    if g.shape != sizes.shape or (g.size and g.dtype.kind not in "iu"):
        raise ValueError(f"groups must be {len(sizes)} integers (one per shard), got {g.dtype} {g.shape}")
    if g.size and (g.min() < 0 or g.max() >= len(weights)):
        raise ValueError(f"groups must be in 0..{len(weights) - 1} (len(weights) == {len(weights)}, one "
                         f"per group), got {int(g.min())}..{int(g.max())}")
    counts = np.bincount(g, weights=sizes, minlength=len(weights))
    empty = [i for i, x in enumerate(weights) if x > 0 and counts[i] == 0]
    if empty:
        raise ValueError(f"group(s) {empty} have weight > 0 but no samples")
    return g.astype(np.int64)


def draw_epoch(shard_sizes: np.ndarray | Sequence[int], *, seed: int, epoch: int, groups: np.ndarray | None = None,
               weights: Sequence[float] | None = None, epoch_size: int | None = None,
               resample: bool = False) -> ShardVisits:
    """The samples of one epoch, as shard visits in draw order (the caller shuffles visits).

    Args:
        shard_sizes: samples per shard (``>= 0``); shard ``k`` holds ids
            ``sum(shard_sizes[:k]) ..`` (contiguous). Empty shards are never visited.
        groups: group (dataset) of each shard, ``0..G-1``; used only with ``weights``.
        weights: one per group, ``>= 0``, positive sum; need not sum to 1.
        epoch_size: samples in the epoch; default the total sample count.
        resample: draw shards with replacement instead of whole passes, every non-empty
            shard of the group equally likely, so every sample has the same expected count
            and a shard's share of the samples is ∝ its size (WebDataset ResampledShards).
            (Drawing shards ∝ size would give a share ∝ size², favouring big shards.)

    Each group ``g`` gets exactly ``quotas(weights, epoch_size)[g]`` samples (one group
    of weight 1 without ``weights``). Without ``resample``: as many whole passes over the
    group as fit (each shard once per pass, seeded order), then shards in seeded order
    until the quota, the last one cut to a seeded random subset; so each sample of the
    group appears ``floor`` or ``ceil(quota / group size)`` times. With ``resample``:
    whole shards drawn until the quota, the last cut the same way. Groups come in group
    order. Without ``weights``, ``epoch_size`` and ``resample`` the epoch is every shard
    once in shard order (``ids == arange(total)``), in O(K) numpy.

    Returns:
        :class:`ShardVisits`, a function of the arguments only (``seed``, ``epoch >= 0``).

    Raises:
        ValueError: bad sizes, weights, groups or epoch_size; a group with weight > 0 and
            no samples.
    """
    sizes = np.asarray(shard_sizes)
    if sizes.ndim != 1 or (sizes.size and (sizes.dtype.kind not in "iu" or sizes.min() < 0)):
        raise ValueError(f"shard_sizes must be a 1-D array of integers >= 0, got {sizes.dtype} {sizes.shape}")
    sizes = sizes.astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(starts[-1])
    if weights is None and epoch_size is None and not resample:
        keep = np.flatnonzero(sizes).astype(np.int64)
        return ShardVisits(keep, np.append(starts[keep], total), np.arange(total, dtype=np.int64))
    size = total if epoch_size is None else operator.index(epoch_size)
    per_group = quotas([1.0] if weights is None else weights, size)
    group_of = _group_of(sizes, groups, weights)
    if size and total == 0:
        raise ValueError(f"epoch_size {size} needs samples, but all shards are empty")
    out = [_group_visits(np.flatnonzero((group_of == g) & (sizes > 0)).astype(np.int64), sizes, starts, quota,
                         resample, np.random.default_rng([seed, epoch, _TAG, g]))
           for g, quota in enumerate(per_group)]
    shard, lens, ids = (np.concatenate([o[i] for o in out]) for i in range(3))
    return ShardVisits(shard, np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), ids)


def draw_round(shard_sizes: np.ndarray | Sequence[int], *, seed: int, epoch: int, round: int, size: int,
               groups: np.ndarray | None = None, weights: Sequence[float] | None = None) -> ShardVisits:
    """Round ``round`` of a streamed resampled epoch (:mod:`turbofeed.plan.stream_rounds`):
    ``size`` samples of whole shards drawn with replacement, as :func:`draw_epoch` with
    ``resample`` draws them (each non-empty shard of a group equally likely, the last
    visit cut to a seeded subset), but keyed by ``(seed, epoch, round)`` too, and each
    group's count drawn (multinomial by ``weights``) instead of rounded: the shares hold
    in expectation in rounds of any size, even of one sample.

    Returns:
        :class:`ShardVisits` of ``size`` samples, groups in group order.

    Raises:
        ValueError: as :func:`draw_epoch`.
    """
    sizes = np.asarray(shard_sizes)
    draw_epoch(sizes, seed=seed, epoch=epoch, groups=groups, weights=weights, epoch_size=0,
               resample=True)  # the same checks of sizes, groups and weights; nothing drawn
    sizes = sizes.astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    if size and not starts[-1]:
        raise ValueError(f"epoch_size {size} needs samples, but all shards are empty")
    group_of = _group_of(sizes, groups, weights)
    w = np.array([1.0] if weights is None else weights, dtype=np.float64)
    per_group = np.random.default_rng([seed, epoch, _ROUND_TAG, round]).multinomial(size, w / w.sum())
    out = [_group_visits(np.flatnonzero((group_of == g) & (sizes > 0)).astype(np.int64), sizes, starts, int(quota),
                         True, np.random.default_rng([seed, epoch, _ROUND_TAG, round, g]))
           for g, quota in enumerate(per_group.tolist())]
    shard, lens, ids = (np.concatenate([o[i] for o in out]) for i in range(3))
    return ShardVisits(shard, np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), ids)


@dataclass(frozen=True)
class EpochDraw:
    """How every epoch draws its samples: the plan options ``weights``, ``epoch_size`` and
    ``resample`` (see :func:`draw_epoch`) over a dataset's shards.

    Attributes:
        shard_sizes: samples per shard, in dataset order.
        groups: the group (dataset of a mix) of each shard; used with ``weights``.
        weights: one per group.
        epoch_size: samples per epoch (default: all of them).
        resample: draw shards with replacement.
    """

    shard_sizes: np.ndarray
    groups: np.ndarray | None = None
    weights: tuple[float, ...] | None = None
    epoch_size: int | None = None
    resample: bool = False

    @property
    def size(self) -> int:
        """Samples in every epoch."""
        return int(np.sum(self.shard_sizes)) if self.epoch_size is None else int(self.epoch_size)

    def resampled(self, *, seed: int, epoch: int) -> ResampledEpoch:
        """The global order of ``epoch`` drawn lazily, position by position (with
        ``resample``, outside streaming: :mod:`turbofeed.plan.resampled`)."""
        draw_epoch(self.shard_sizes, seed=seed, epoch=epoch, groups=self.groups, weights=self.weights,
                   epoch_size=0, resample=True)  # the same checks of sizes, groups and weights, nothing drawn
        return ResampledEpoch(self.shard_sizes, seed=seed, epoch=epoch, size=self.size, groups=self.groups,
                              weights=self.weights)

    def visits(self, *, seed: int, epoch: int) -> ShardVisits:
        """The samples of ``epoch`` (:func:`draw_epoch`)."""
        return draw_epoch(self.shard_sizes, seed=seed, epoch=epoch, groups=self.groups, weights=self.weights,
                          epoch_size=self.epoch_size, resample=self.resample)

    def fingerprint(self) -> dict:
        """What of the draw decides the order (for the resume state's ``plan``)."""
        return {"weights": None if self.weights is None else list(self.weights),
                "groups": None if self.groups is None else np.bincount(self.groups).tolist(),
                "epoch_size": self.epoch_size, "resample": self.resample}
