"""The bad-sample policy: one small counted object shared by every path."""

from __future__ import annotations

import logging
import threading

from ..errors import SampleError
from .stats import Stats

log = logging.getLogger("turbofeed")

ON_ERROR = ("replace", "skip", "raise")


class ErrorPolicy:
    """Decides what a bad sample does and keeps the count.

    ``on_error``:

    ============ ==================================================================
    ``replace``  (default) the slot gets the next good sample of this rank's order:
                 same batch shape, same step count, resume stays exact
    ``skip``     the sample is dropped, its batch is one smaller (single process)
    ``raise``    the loader raises :class:`turbofeed.SampleError` naming shard,
                 key and reason
    ============ ==================================================================

    Each bad (shard, key) is logged once as a warning; repeats are only counted.
    """

    def __init__(self, on_error: str, stats: Stats) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.mode = on_error
        self.stats = stats
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def record(self, error: SampleError) -> None:
        """Count ``error`` and log it the first time its sample fails."""
        self.stats.count_error(error.stage)
        with self._lock:
            first = (error.shard, error.key) not in self._seen
            self._seen.add((error.shard, error.key))
        if first:
            action = {"replace": "replaced by the next good sample", "skip": "skipped",
                      "raise": "raising"}[self.mode]
            log.warning("turbofeed: bad sample %s (%s)", error, action)
