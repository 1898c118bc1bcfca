"""base.counters: named counts under one lock, split by reason, copied out whole."""

from __future__ import annotations

import threading

import pytest

from turbofeed.base.counters import Counters


def test_counts_and_reasons_are_copied_out_together():
    counts = Counters("requests", "retries")
    assert counts.as_dict() == {"requests": 0, "retries": 0}
    counts.add("requests")
    counts.add_many(requests=2, retries=0)
    counts.add("retries", reason="ConnectionError")
    counts.add("retries", 2, reason="SlowDown")
    assert counts.get("requests") == 3 and counts.get("retries") == 3
    assert counts.reasons("retries") == {"ConnectionError": 1, "SlowDown": 2}
    assert counts.reasons("requests") == {}
    snapshot = counts.as_dict(retry_reasons="retries")
    assert snapshot == {"requests": 3, "retries": 3, "retry_reasons": {"ConnectionError": 1, "SlowDown": 2}}
    counts.add("retries", reason="SlowDown")
    assert snapshot["retry_reasons"]["SlowDown"] == 2  # a copy, not a live view


def test_a_misspelt_name_is_an_error_and_adds_nothing():
    counts = Counters("hits", "misses")
    with pytest.raises(KeyError, match="'hit'.*hits, misses"):
        counts.add("hit")
    with pytest.raises(KeyError):
        counts.add_many(hits=1, mises=1)
    assert counts.as_dict() == {"hits": 0, "misses": 0}


def test_adds_from_many_threads_are_all_counted():
    counts = Counters("n", "bytes")

    def work() -> None:
        for _ in range(5000):
            counts.add("n", reason="x")
            counts.add_many(bytes=3)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts.as_dict(by_reason="n") == {"n": 40000, "bytes": 120000, "by_reason": {"x": 40000}}
