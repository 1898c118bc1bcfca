"""Exceptions that say where a problem happened, so users can find the file from the message."""

from __future__ import annotations


class TurbofeedError(Exception):
    """Base class of every error turbofeed raises on purpose."""


class DatasetError(TurbofeedError):
    """The dataset as a whole cannot be used: a missing path, no samples, a broken shard.

    The message always names the path (and the byte offset for a broken tar).
    """


class SampleError(TurbofeedError):
    """One sample could not be read, decoded or transformed.

    Args:
        shard: the tar shard or folder the sample lives in.
        key: the sample key (``n01440764/n01440764_10026``).
        stage: the pipeline stage that failed (``fetch``, ``decode.cpu``, ``augment``).
        reason: a short human-readable cause.

    ``str(err)`` is one line: ``decode.cpu: shard-000012.tar/n01440764_10026: truncated JPEG``.
    """

    def __init__(self, shard: str, key: str, stage: str, reason: str) -> None:
        super().__init__(shard, key, stage, reason)
        self.shard = shard
        self.key = key
        self.stage = stage
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.stage}: {self.shard}/{self.key}: {self.reason}"
