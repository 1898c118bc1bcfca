"""Named counts under one lock: the one counter class of turbofeed.

The S3 client's requests and cache hits, the fault proxy's injected faults, the block
cache's loads and the loader's stats all count named things from many threads. They
share this class, so each counts the same way: declared names (a misspelt one is an
error, not a new zero), one lock, and copies out (``as_dict``) that never change under
the caller.

Imports nothing from turbofeed: it is part of :mod:`turbofeed.base`, which every package may use.
"""

from __future__ import annotations

import threading
from typing import Any


class Counters:
    """Integer counts by name, each optionally split by reason; thread-safe.

    Invariant: every count ``as_dict`` returns was declared at construction, and the
    reason counts of a name sum to what was added to it with a reason (taken under the
    same lock as the count, so a copy never shows one without the other).

    Example::

        counts = Counters("requests", "retries")
        counts.add("requests")
        counts.add("retries", reason="ConnectionError")
        counts.add_many(requests=2)
        counts.as_dict()                         # {"requests": 3, "retries": 1}
        counts.as_dict(retry_reasons="retries")  # ... and "retry_reasons": {"ConnectionError": 1}

    Args:
        names: the counts, in the order ``as_dict`` lists them; each starts at 0.
    """

    def __init__(self, *names: str) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(names, 0)
        self._reasons: dict[str, dict[str, int]] = {}

    def _check(self, name: str) -> None:
        if name not in self._counts:
            raise KeyError(f"no count named {name!r}; counted: {', '.join(self._counts)}")

    def add(self, name: str, n: int = 1, *, reason: str | None = None) -> None:
        """Add ``n`` to ``name`` (and to its count for ``reason``, when given).

        Raises:
            KeyError: ``name`` was not declared.
        """
        with self._lock:
            self._check(name)
            self._counts[name] += n
            if reason is not None:
                by_reason = self._reasons.setdefault(name, {})
                by_reason[reason] = by_reason.get(reason, 0) + n

    def add_many(self, **counts: int) -> None:
        """Add to several counts at once (under one lock: a copy sees all or none).

        Raises:
            KeyError: a name was not declared (nothing is added then).
        """
        with self._lock:
            for name in counts:
                self._check(name)
            for name, n in counts.items():
                self._counts[name] += n

    def get(self, name: str) -> int:
        """The count of ``name``.

        Raises:
            KeyError: ``name`` was not declared.
        """
        with self._lock:
            self._check(name)
            return self._counts[name]

    def reasons(self, name: str) -> dict[str, int]:
        """A copy of ``name``'s counts by reason (``{}`` when none was given)."""
        with self._lock:
            self._check(name)
            return dict(self._reasons.get(name, {}))

    def as_dict(self, **reasons_of: str) -> dict[str, Any]:
        """A JSON-safe copy of every count; for each ``key=name``, also ``name``'s counts by
        reason under ``key``. All taken at once, under the lock."""
        with self._lock:
            for name in reasons_of.values():
                self._check(name)
            out: dict[str, Any] = dict(self._counts)
            for key, name in reasons_of.items():
                out[key] = dict(self._reasons.get(name, {}))
            return out

    def __repr__(self) -> str:
        return f"Counters({self.as_dict()})"
