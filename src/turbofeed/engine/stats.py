"""Counters and per-stage timers a loader exposes as ``loader.stats``."""

from __future__ import annotations

import threading

from ..base.counters import Counters
from .timeline import CONSUMER_STAGE, Timeline

STAGES = ("fetch", "decode.cpu", "decode.gpu", "augment", "collate", "wait")
COUNTS = ("samples", "batches", "errors", "replaced", "skipped", "dropped_batches", "bytes_read")


class Stats:
    """What happened so far (since the loader was built).

    Attributes:
        samples: samples delivered in batches.
        batches: batches delivered.
        errors: distinct bad samples per stage (``fetch``, ``decode.cpu``, ``augment``),
            each counted once however often it was tried; ``gpu_fallback`` counts
            fallbacks from ``gpu_decode`` to the CPU (no decoder; each image it refused).
        replaced: slots that got the next good sample instead of a bad one
            (``on_error="replace"``); a bad sample in two epochs fills two slots.
        skipped: bad samples dropped from their batch (``on_error="skip"``, or with
            ``buckets=`` a sample of a bucket without any good sample).
        dropped_batches: batches left out of the epoch: with ``buckets=``, those of a
            bucket whose every sample is bad (no good sample of its shape to replace them).
        skipped_at_index: entries left out while indexing (a TFRecord record that is not an
            Example, an array row without an image); a tar sample without an image or with a
            bad label is a bad sample instead (counted in ``errors`` when met).
        bytes_read: encoded bytes fetched from storage (replacements and re-reads included).
        damaged_shards: shards reported while indexing (truncated or corrupt: used up to the
            damage; empty, unreadable or compressed with zstd: no samples; duplicate member
            names: the last copy used), each with a warning saying which.
        seconds: worker-thread seconds per stage (summed over threads) and the caller's
            ``wait`` for batches: the profile that shows the bottleneck.
        timeline: None (the default), or a :class:`Timeline` that the same timers also
            feed with one span per stage and task (a chunk of samples on the native
            path, one sample elsewhere; ``turbofeed bench --plot``); set it before iterating.
    """

    def __init__(self) -> None:
        self._counts = Counters(*COUNTS)  # errors: counted by stage (the reason)
        self._lock = threading.Lock()  # the stage seconds
        self.skipped_at_index = 0
        self.damaged_shards: list[str] = []
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self.timeline: Timeline | None = None

    @property
    def samples(self) -> int:
        return self._counts.get("samples")

    @property
    def batches(self) -> int:
        return self._counts.get("batches")

    @property
    def replaced(self) -> int:
        return self._counts.get("replaced")

    @property
    def skipped(self) -> int:
        return self._counts.get("skipped")

    @property
    def dropped_batches(self) -> int:
        return self._counts.get("dropped_batches")

    @property
    def bytes_read(self) -> int:
        return self._counts.get("bytes_read")

    @property
    def errors(self) -> dict[str, int]:
        """Distinct bad samples per stage (a copy)."""
        return self._counts.reasons("errors")

    def add_times(self, **seconds: float) -> None:
        """Add stage times that just ended, in the order they ran (``decode_cpu=``, ``augment=``)."""
        if self.timeline is not None:  # the only cost of the timeline when it is off
            self.timeline.ending_now(seconds)
        with self._lock:
            for stage, s in seconds.items():
                self.seconds[stage.replace("_", ".")] += s

    def add_fetch(self, seconds: float, nbytes: int) -> None:
        if self.timeline is not None:
            self.timeline.ending_now({"fetch": seconds})
        with self._lock:
            self.seconds["fetch"] += seconds
        self._counts.add("bytes_read", nbytes)

    def add_chunk(self, fetch: float, decode: float, nbytes: int) -> None:
        """A chunk of samples read (``fetch`` seconds, ``nbytes``) and decoded (``decode``
        seconds) in one native call (:mod:`turbofeed.engine.chunks`): one update, not one per sample."""
        if self.timeline is not None:
            self.timeline.ending_now({"fetch": fetch, "decode.cpu": decode})
        with self._lock:
            self.seconds["fetch"] += fetch
            self.seconds["decode.cpu"] += decode
        self._counts.add("bytes_read", nbytes)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the count ``name`` (``samples``, ``batches``, ``replaced``, ``skipped``)."""
        self._counts.add(name, n)

    def count_error(self, stage: str) -> None:
        self._counts.add("errors", reason=stage)

    def as_dict(self) -> dict:
        """A JSON-safe copy."""
        counts = self._counts.as_dict(errors="errors")
        with self._lock:
            seconds = {k: round(v, 6) for k, v in self.seconds.items()}
        return {
            "samples": counts["samples"], "batches": counts["batches"], "errors": counts["errors"],
            "replaced": counts["replaced"], "skipped": counts["skipped"], "dropped_batches": counts["dropped_batches"],
            "skipped_at_index": self.skipped_at_index, "bytes_read": counts["bytes_read"],
            "damaged_shards": list(self.damaged_shards), "seconds": seconds,
        }

    def __repr__(self) -> str:
        counts = self._counts.as_dict(errors="errors")
        return (f"Stats(samples={counts['samples']}, batches={counts['batches']}, errors={counts['errors']}, "
                f"replaced={counts['replaced']}, skipped={counts['skipped']}, "
                f"dropped_batches={counts['dropped_batches']}, skipped_at_index={self.skipped_at_index}, bytes_read={counts['bytes_read']}, "
                f"damaged_shards={self.damaged_shards})")

    def profile(self) -> str:
        """One line per worker stage that ran: seconds and share of the workers' total,
        biggest first; then the consumer's ``wait`` for batches on a line of its own (it
        is the training loop's thread, not a worker's: no share of theirs).

        Stages that never ran (``decode.gpu`` on the CPU path, ``augment`` and ``collate``
        where decoding writes straight into the batch) are left out: rows of 0.000 s
        would read as "free" rather than "not used here". ``as_dict()`` keeps them all.
        """
        with self._lock:
            ran = {k: v for k, v in self.seconds.items() if v > 0}
        if not ran:
            return "(no stage has run yet)"
        wait = ran.pop(CONSUMER_STAGE, None)
        total = sum(ran.values())
        rows = sorted(ran.items(), key=lambda kv: -kv[1])
        lines = [f"{k:<11} {v:9.3f} s {100 * v / total:5.1f}%" for k, v in rows]
        if wait is not None:
            lines.append(f"{CONSUMER_STAGE:<11} {wait:9.3f} s  (the consumer waiting for batches, not a worker)")
        return "\n".join(lines)
