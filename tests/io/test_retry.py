"""io.retry: exponential backoff with full jitter, bounded attempts, final errors raised
at once, a stop event that ends the wait, and messages that name the request."""

from __future__ import annotations

import random
import threading
import time

import pytest

from turbofeed.io.retry import RemoteError, RetryPolicy


class Flaky(Exception):
    pass


class Final(Exception):
    pass


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, Flaky)


def test_backoff_is_full_jitter_under_an_exponential_cap():
    policy = RetryPolicy(base_delay=0.1, max_delay=1.0)
    rng = random.Random(0)
    for attempt, cap in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (60, 1.0), (10_000, 1.0)]:
        draws = [policy.backoff(attempt, rng) for _ in range(2000)]
        assert 0.0 <= min(draws) and max(draws) <= cap
        assert min(draws) < 0.05 * cap and max(draws) > 0.95 * cap  # spread over [0, cap]


def test_retryable_errors_are_retried_until_success():
    calls, retried = [], []

    def fn():
        calls.append(1)
        if len(calls) < 4:
            raise Flaky("503 SlowDown")
        return "ok"
    policy = RetryPolicy(max_attempts=5, base_delay=0.001, max_delay=0.002)
    assert policy.call(fn, what="GET s3://b/k", retryable=_retryable, on_retry=retried.append) == "ok"
    assert len(calls) == 4 and len(retried) == 3 and all(isinstance(e, Flaky) for e in retried)


def test_out_of_attempts_names_the_request_and_keeps_the_cause():
    calls = []

    def fn():
        calls.append(1)
        raise Flaky("503 SlowDown")
    policy = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.002)
    with pytest.raises(RemoteError) as info:
        policy.call(fn, what="s3://b/k bytes 0-9", retryable=_retryable)
    assert len(calls) == 3
    assert str(info.value) == "s3://b/k bytes 0-9: gave up after 3 attempts: Flaky: 503 SlowDown"
    assert isinstance(info.value.__cause__, Flaky)


def test_final_errors_are_not_retried():
    calls = []

    def fn():
        calls.append(1)
        raise Final("404 Not Found")
    with pytest.raises(RemoteError, match=r"^HEAD s3://b/k: Final: 404 Not Found$"):
        RetryPolicy(max_attempts=8).call(fn, what="HEAD s3://b/k", retryable=_retryable)
    assert len(calls) == 1


def test_a_stop_event_ends_the_wait_at_once():
    stop = threading.Event()

    def fn():
        raise Flaky("down")
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    with pytest.raises(RemoteError, match="stopped while retrying"):
        RetryPolicy(max_attempts=5, base_delay=30, max_delay=30).call(
            fn, what="GET s3://b/k", retryable=_retryable, stop=stop)
    assert time.monotonic() - started < 5


def test_long_messages_are_cut_to_their_first_part():
    """obstore appends a multi-line debug dump of the request; the message keeps the
    summary on one line."""
    text = ("Generic S3 error: Object at location k not found: Client error with status 404\n\n"
            "Debug source:\nNotFound {\n    path: \"k\",\n    source: " + "x" * 2000 + "}")

    def fn():
        raise Final(text)
    with pytest.raises(RemoteError) as info:
        RetryPolicy().call(fn, what="GET s3://b/k", retryable=_retryable)
    message = str(info.value)
    assert "\n" not in message and "Debug source" not in message and len(message) < 400
    assert message.startswith("GET s3://b/k: Final: Generic S3 error: Object at location k not found")


@pytest.mark.parametrize("kw", [{"max_attempts": 0}, {"base_delay": -1}, {"max_delay": -1}])
def test_bad_policies_are_refused(kw):
    with pytest.raises(ValueError):
        RetryPolicy(**kw)
