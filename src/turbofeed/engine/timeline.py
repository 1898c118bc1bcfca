"""A timeline of who was busy when: spans of (thread, stage, start, end), and the
bottleneck they show in words. Drawn by ``turbofeed bench --plot`` (``turbofeed._plot``).

Off unless attached: ``loader.stats.timeline = Timeline()``. The stage timers that feed
``stats.seconds`` also feed the timeline, so when it is off each timer costs one
``is None`` check more and nothing else.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

log = logging.getLogger("turbofeed")

DEFAULT_CAP = 200_000  # about 120 bytes a span: ~25 MB at most
CONSUMER_STAGE = "wait"  # the caller's wait for a batch; its thread is the consumer
CONSUMER_BOUND_BELOW = 0.10  # the consumer waits less than this share of the run: its code is the bottleneck
_BOUND = {"fetch": "I/O-bound", "decode.cpu": "decode-bound", "decode.gpu": "decode-bound",
          "augment": "augment-bound", "collate": "collate-bound"}


class Span(NamedTuple):
    """One stage of one sample (or one wait for a batch) on one thread, in
    ``time.perf_counter`` seconds."""

    thread: str
    stage: str
    t0: float
    t1: float


class Timeline:
    """Thread-safe, bounded record of :class:`Span` objects.

    Invariant: it holds at most ``cap`` spans; once full it keeps the first ``cap``,
    counts the rest in ``dropped`` and logs one warning (``note()`` says it for a plot).
    """

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.cap = cap
        self.dropped = 0
        self._spans: list[Span] = []
        self._lock = threading.Lock()

    def ending_now(self, seconds: Mapping[str, float]) -> None:
        """Record consecutive stages of the calling thread that end now, in order:
        ``{"decode_cpu": 0.004, "augment": 0.001}`` is a decode then an augment span.
        Stage names take dots for underscores, as in ``Stats.seconds``."""
        t = time.perf_counter() - sum(seconds.values())
        thread = threading.current_thread().name
        spans = []
        for stage, s in seconds.items():
            spans.append(Span(thread, stage.replace("_", "."), t, t + s))
            t += s
        self.add(spans)

    def add(self, spans: Iterable[Span]) -> None:
        new = list(spans)
        with self._lock:
            room = self.cap - len(self._spans)
            first_drop = self.dropped == 0 and len(new) > room
            self._spans.extend(new[:max(room, 0)])
            self.dropped += max(len(new) - max(room, 0), 0)
        if first_drop:
            log.warning("turbofeed: timeline full at %d spans: later spans are not recorded", self.cap)

    @property
    def full(self) -> bool:
        return self.dropped > 0

    def spans(self) -> list[Span]:
        """A copy of the spans recorded so far."""
        with self._lock:
            return list(self._spans)

    def note(self) -> str | None:
        """None, or what a reader of the plot must know: it shows only the start of the run."""
        if not self.dropped:
            return None
        return f"timeline full: the first {self.cap} spans only, {self.dropped} more not recorded"


@dataclass(frozen=True)
class Verdict:
    """What the spans say about the bottleneck (see :func:`verdict`).

    Attributes:
        bound: ``decode-bound``, ``I/O-bound``, ``augment-bound``, ``collate-bound``,
            ``consumer-bound`` (the caller's own code) or ``unknown`` (no spans).
        worker_busy: share of the worker threads' time spent in a stage (0..1).
        consumer_wait: share of the consumer's time spent waiting for a batch (0..1).
        stage_share: each worker stage's share of the busy time (sums to 1).
        seconds: the run's length, first span start to last span end.
    """

    bound: str
    worker_busy: float = 0.0
    consumer_wait: float = 0.0
    stage_share: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def __str__(self) -> str:
        if self.bound == "unknown":
            return "nothing recorded"
        waiting = f"consumer waiting {self.consumer_wait:.0%}"
        busy = f"workers busy {self.worker_busy:.0%}"
        if self.bound == "consumer-bound":
            return f"{waiting}, {busy}: your code is the bottleneck (consumer-bound)"
        stage, share = max(self.stage_share.items(), key=lambda kv: kv[1])
        return f"{busy} ({share:.0%} of it {stage}): {self.bound}; {waiting}"


def verdict(spans: Iterable[Span]) -> Verdict:
    """Name the bottleneck from a run's spans.

    Threads with ``wait`` spans are consumers; all others are workers. A consumer that
    waits less than 10% of the run is the bottleneck itself (``consumer-bound``: the
    loader keeps up with it). Otherwise the loader is, and the stage with the most worker
    time names it: ``fetch`` -> ``I/O-bound``, ``decode.*`` -> ``decode-bound``, ...

    Example: two workers each 97% busy (85 points of it decoding) and a consumer waiting
    90% of the time -> ``workers busy 97% (88% of it decode.cpu): decode-bound;
    consumer waiting 90%``.
    """
    spans = list(spans)
    if not spans:
        return Verdict("unknown")
    start = min(s.t0 for s in spans)
    seconds = max(s.t1 for s in spans) - start
    consumers = {s.thread for s in spans if s.stage == CONSUMER_STAGE}
    workers = {s.thread for s in spans} - consumers
    waited = sum(s.t1 - s.t0 for s in spans if s.stage == CONSUMER_STAGE)
    by_stage: dict[str, float] = {}
    for s in spans:
        if s.thread in workers:
            by_stage[s.stage] = by_stage.get(s.stage, 0.0) + (s.t1 - s.t0)
    busy = sum(by_stage.values())
    if seconds <= 0:
        return Verdict("unknown")
    worker_busy = busy / (len(workers) * seconds) if workers else 0.0
    consumer_wait = waited / (len(consumers) * seconds) if consumers else 0.0
    share = {k: v / busy for k, v in by_stage.items()} if busy > 0 else {}
    if consumers and consumer_wait < CONSUMER_BOUND_BELOW:
        bound = "consumer-bound"
    elif share:
        top = max(share.items(), key=lambda kv: kv[1])[0]
        bound = _BOUND.get(top, f"{top}-bound")
    else:
        bound = "unknown"
    return Verdict(bound, worker_busy, consumer_wait, share, seconds)
