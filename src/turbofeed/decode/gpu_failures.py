"""How the GPU decoder's failures are split, recorded and said: a batched call that fails
is tried again in halves (:func:`decode_bisecting`), and every exception on the way is
counted and logged once per kind (:class:`DecoderFailures`), so a decoder that fails
every call is not CPU decoding with nothing said (gpu-review S1)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .gpu_backend import first_line

log = logging.getLogger("turbofeed")


class DecoderFailures:
    """What a GPU decoder's calls raised: counted by kind (the exception's type and the
    first line of its message), the first of each kind logged as a warning (logger
    ``turbofeed``) with its whole text. Thread-safe.

    A failed call is retried in halves (:func:`decode_bisecting`) and an image that fails
    alone is decoded on the CPU (``stats.errors["gpu_fallback"]``): without this record
    a decoder failing every call (nvJPEG that does not start, out of memory, a changed
    API) would be CPU decoding with nothing said. Each :class:`~turbofeed.decode.gpu.GpuDecoder`
    has its own (``decoder.failures``): once per kind is once per decoder.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def record(self, exc: BaseException, what: str = "a batch") -> None:
        """Count ``exc``, raised by the decoder for ``what``; log it if its kind is new."""
        kind = f"{type(exc).__name__}: {first_line(exc)}"
        with self._lock:
            seen = self._counts.get(kind, 0)
            self._counts[kind] = seen + 1
        if not seen:
            log.warning("turbofeed: the GPU decoder failed on %s (logged once per kind of failure; those "
                        "images are tried again in halves, each that fails alone is decoded on the CPU): "
                        "%s: %s", what, type(exc).__name__, exc)

    @property
    def total(self) -> int:
        """Failed calls of every kind."""
        with self._lock:
            return sum(self._counts.values())

    def as_dict(self) -> dict[str, int]:
        """Failed calls per kind (a copy)."""
        with self._lock:
            return dict(self._counts)


#: Where failures go when the caller names no record (a decoder of your own calling
#: :func:`decode_bisecting`): logged and counted all the same.
FAILURES = DecoderFailures()


def decode_bisecting(decode_many: Callable[[list[Any]], Sequence[Any]], items: list[Any],
                     failures: DecoderFailures | None = None) -> list[Any | None]:
    """``decode_many(items)``, which fails as a whole when one item is bad; on failure the
    halves are tried again, down to single items (None for each that fails alone). Each
    failure is recorded in ``failures`` (default :data:`FAILURES`): counted, and logged
    once per kind."""
    if not items:
        return []
    try:
        return list(decode_many(items))
    except Exception as exc:
        (FAILURES if failures is None else failures).record(exc, f"a batch of {len(items)}"
                                                            if len(items) > 1 else "one image")
        if len(items) == 1:
            return [None]
        half = len(items) // 2
        return (decode_bisecting(decode_many, items[:half], failures)
                + decode_bisecting(decode_many, items[half:], failures))


def decode_parsed(parse: Callable[[Any], Any], decode_many: Callable[[list[Any]], Sequence[Any]],
                  items: Sequence[Any], failures: DecoderFailures | None = None) -> list[Any | None]:
    """``parse`` each item on its own (None for one that raises), then
    :func:`decode_bisecting` the parsed ones: one item its backend cannot parse no longer
    fails the whole batch (nvImageCodec fails a whole list of bytes on one it cannot read).
    Each failure, of a parse or a decode, is recorded in ``failures`` (default :data:`FAILURES`)."""
    keep: list[int] = []
    parsed: list[Any] = []
    for i, item in enumerate(items):
        try:
            parsed.append(parse(item))
        except Exception as exc:  # the backend's error for data it cannot read: that item is None
            (FAILURES if failures is None else failures).record(exc, "reading one image's header")
            continue
        keep.append(i)
    out: list[Any | None] = [None] * len(items)
    for i, result in zip(keep, decode_bisecting(decode_many, parsed, failures)):
        out[i] = result
    return out
