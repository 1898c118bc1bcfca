"""The bad-sample policy: one small counted object shared by every path."""

from __future__ import annotations

import logging
import threading

import numpy as np

from ..errors import SampleError
from ..plan import Order
from .stats import Stats

log = logging.getLogger("turbofeed")

ON_ERROR = ("replace", "skip", "raise")


class ErrorPolicy:
    """Decides what a bad sample does and keeps the count.

    ``on_error``:

    ============ ==================================================================
    ``replace``  (default) the slot gets the next good sample of this rank's order,
                 however long the bad run (wrapping around): same batch shape, same
                 step count, resume stays exact. Only a rank whose whole order is bad
                 raises :class:`turbofeed.DatasetError`. With aspect-ratio buckets, a
                 sample of the same bucket (of the order, else of the dataset); the
                 batches of a bucket without any good sample are dropped
    ``skip``     the sample is dropped, its batch is one smaller (single process)
    ``raise``    the loader raises :class:`turbofeed.SampleError` naming shard,
                 key and reason
    ============ ==================================================================

    Each bad (shard, key) is counted once in ``stats.errors[stage]`` and logged once as a
    warning, however often it is tried (as its own slot, as a replacement for others, in
    later epochs). E.g. ``replace`` over the order ``a b1 b2 b3 c`` (``b*`` bad) yields
    ``a c c c c``: ``stats.errors == {"decode.cpu": 3}``, ``stats.replaced == 3``.

    Each pass over an epoch works through :meth:`for_pass`, which also remembers the
    samples found bad in that pass, so a long bad run is not decoded again for every slot.
    """

    def __init__(self, on_error: str, stats: Stats) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.mode = on_error
        self.stats = stats
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def record(self, error: SampleError) -> bool:
        """Count and log ``error`` if its sample never failed before; True if so."""
        with self._lock:
            first = (error.shard, error.key) not in self._seen
            self._seen.add((error.shard, error.key))
        if first:
            self.stats.count_error(error.stage)
            action = {"replace": "replaced by the next good sample", "skip": "skipped",
                      "raise": "raising"}[self.mode]
            log.warning("turbofeed: bad sample %s (%s)", error, action)
        return first

    def for_pass(self) -> "PassPolicy":
        """A view for one pass over one plan, shared by that pass's worker threads."""
        return PassPolicy(self)


class PassPolicy:
    """The :class:`ErrorPolicy` as one pass (one plan's ``order``) sees it: the same
    ``mode``, ``stats`` and once-only counting, plus the positions of ``order`` known bad
    in this pass. Thread-safe.

    Known-bad positions form runs; :meth:`next_unknown` jumps over a run in one step
    (pointer jumping with path compression), so replacing every slot of a run of ``L``
    bad samples costs O(L) decodes and about O(L) lookups, not O(L**2).
    """

    def __init__(self, policy: ErrorPolicy) -> None:
        self.policy = policy
        self.mode = policy.mode
        self.stats = policy.stats
        # index i -> d: indices i .. i+d-1 (mod len(order)) are all known bad
        self._skip: dict[int, int] = {}
        self._bad_ids: set[int] = set()
        self._replaced: set[int] = set()  # positions whose slot got a replacement
        self._bad_buckets: set[int] = set()  # aspect-ratio buckets without any good sample
        self._lock = threading.Lock()

    def record(self, error: SampleError, index: int | None = None, gid: int | None = None) -> bool:
        """Count/log ``error`` once per sample; remember ``order[index] == gid`` is bad."""
        with self._lock:
            if index is not None:
                self._skip.setdefault(index, 1)
            if gid is not None:
                self._bad_ids.add(gid)
        return self.policy.record(error)

    def count_replaced(self, position: int) -> None:
        """The slot of ``position`` got a replacement: one ``stats.replaced``, once (the
        GPU path may replace a slot's replacement again when the decoder refuses it)."""
        with self._lock:
            first = position not in self._replaced
            self._replaced.add(position)
        if first:
            self.stats.count("replaced")

    def mark_bucket_bad(self, bucket: int) -> bool:
        """Every sample of aspect-ratio ``bucket`` failed in this pass; True the first time."""
        with self._lock:
            first = bucket not in self._bad_buckets
            self._bad_buckets.add(bucket)
        return first

    def bucket_is_bad(self, bucket: int) -> bool:
        with self._lock:
            return bucket in self._bad_buckets

    def is_bad(self, index: int, gid: int) -> bool:
        """Whether the sample at ``index`` (id ``gid``) already failed in this pass."""
        with self._lock:
            return index in self._skip or gid in self._bad_ids

    def any_bad(self) -> bool:
        """Whether any sample failed in this pass yet (no lock: a sample that fails at
        this moment is found by its own decode)."""
        return bool(self._skip or self._bad_ids)

    def known_bad(self, positions: np.ndarray, gids: np.ndarray) -> np.ndarray:
        """:meth:`is_bad` of each ``(positions[i], gids[i])``, as a bool array."""
        with self._lock:
            return np.fromiter((int(p) in self._skip or int(g) in self._bad_ids
                                for p, g in zip(positions.tolist(), gids.tolist())), bool, len(positions))

    def next_unknown(self, order: Order, u: int, end: int) -> int | None:
        """The first ``v`` in ``u .. end-1`` whose sample ``order[v % len(order)]`` is not
        known bad in this pass, or None. ``u`` and ``v`` are unwrapped positions."""
        n = len(order)
        with self._lock:
            path = []
            v = u
            while v < end:
                i = v % n
                d = self._skip.get(i)
                if d is None:
                    if int(order[i]) not in self._bad_ids:
                        break
                    d = self._skip[i] = 1  # the same sample at another position (padding)
                path.append(v)
                v += d
            for w in path:  # each visited run now jumps straight to v
                self._skip[w % n] = min(v - w, n)
        return v if v < end else None
