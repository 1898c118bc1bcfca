"""One retry policy for remote storage: exponential backoff with full jitter, bounded attempts.

Every remote request (ranged GET, LIST, HEAD, PUT, multipart part) goes through
:meth:`RetryPolicy.call`; the client decides which errors are worth another try
(5xx, throttling, dropped connections, timeouts, short bodies) and which are final
(404, 403, bad arguments).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import TurbofeedError
from ..redact import redact_text

log = logging.getLogger("turbofeed")
T = TypeVar("T")


class RemoteError(TurbofeedError):
    """A remote request failed for good: not retryable, or out of attempts.

    The message names the URL and, for reads, the byte range:
    ``s3://bucket/shard-000003.tar bytes 1024-2047: gave up after 8 attempts: 503 SlowDown``.
    """


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter (the AWS recommendation).

    Attempt ``k`` (0-based) that fails with a retryable error sleeps a uniform random
    time in ``[0, min(max_delay, base_delay * 2**k)]`` before attempt ``k + 1``; after
    ``max_attempts`` attempts, or a non-retryable error, :class:`RemoteError` is raised
    from the last error. With the defaults the worst case waits about 20 s in total,
    which rides out a server restart or a burst of ``503 SlowDown``.

    Args:
        max_attempts: attempts in all, the first included (1 = no retries).
        base_delay: seconds; the cap of the first backoff.
        max_delay: seconds; no single backoff is longer.
    """

    max_attempts: int = 8
    base_delay: float = 0.1
    max_delay: float = 10.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_delay < 0 or self.max_delay < 0:
            raise ValueError(f"bad retry policy {self}")

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to sleep after failed attempt ``attempt`` (0-based): full jitter."""
        cap = min(self.max_delay, self.base_delay * (2 ** min(attempt, 62)))
        return (rng or random).uniform(0.0, cap)

    def call(self, fn: Callable[[], T], *, what: str, retryable: Callable[[BaseException], bool],
             on_retry: Callable[[BaseException], None] | None = None,
             stop: threading.Event | None = None) -> T:
        """Run ``fn`` until it returns, retrying retryable errors.

        Args:
            fn: the request.
            what: names the request in the final error and the debug log
                (``s3://b/k bytes 0-511``).
            retryable: tells retryable errors from final ones.
            on_retry: called once per retry (the stats counter).
            stop: when set, waiting ends and the last error is raised at once.

        Raises:
            RemoteError: from the last error.
        """
        for attempt in range(self.max_attempts):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - classified just below
                final = not retryable(exc)
                last = attempt + 1 >= self.max_attempts
                if final or last or (stop is not None and stop.is_set()):
                    why = "" if final else f"gave up after {attempt + 1} attempts: "
                    raise RemoteError(f"{what}: {why}{_describe(exc)}") from exc
                delay = self.backoff(attempt)
                log.debug("turbofeed: retry %d/%d of %s in %.3f s: %s", attempt + 1,
                          self.max_attempts - 1, what, delay, _describe(exc))
                if on_retry is not None:
                    on_retry(exc)
                if stop is not None:
                    if stop.wait(delay):
                        raise RemoteError(f"{what}: stopped while retrying: {_describe(exc)}") from exc
                else:
                    time.sleep(delay)
        raise AssertionError("unreachable")


def _describe(exc: BaseException) -> str:
    """One line: the error type and the start of its text, its URLs without userinfo or
    query string (:func:`turbofeed.redact.redact_text`). obstore's errors end in a
    multi-line "Debug source:" dump of the whole request, which is cut off."""
    text = redact_text(str(exc).split("Debug source:", 1)[0])
    text = " ".join(text.split())
    if len(text) > 300:
        text = text[:300] + " ..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
