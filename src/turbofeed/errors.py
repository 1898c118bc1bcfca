"""Exceptions that say where a problem happened, so users can find the file from the message."""

from __future__ import annotations


class TurbofeedError(Exception):
    """Base class of every error turbofeed raises on purpose."""


class MissingExtra(TurbofeedError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs
    it: ``pip install 'turbofeed[torch]'`` (``hdf5``, ``zarr``, ``parquet``, ``s3``, ...).

    An ``ImportError``, so ``from turbofeed import DataLoader`` without torch shows the message.
    """


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


class StorageError(TurbofeedError):
    """Storage failed under a pass: a read that still fails after the retry policy, a file
    or object that changed or vanished while it was read, a disk or cache bound that cannot
    hold a copy. Not bad data: raised whatever ``on_error`` says, after the pass stopped
    cleanly (a ``state_dict()`` taken before it resumes exactly once storage is back).

    Args:
        shard: the shard (path or URL) that failed.
        reason: what happened (``replaced during the pass``, ``gave up after 8 attempts: 503``).

    ``str(err)`` is one line: ``storage: s3://bucket/shard-000003.tar: replaced during the pass``.
    """

    def __init__(self, shard: str, reason: str) -> None:
        super().__init__(shard, reason)
        self.shard = shard
        self.reason = reason

    def __str__(self) -> str:
        return f"storage: {self.shard}: {self.reason}"


class UserCodeError(TurbofeedError):
    """A user callable (a ``transform`` callable, ``map``, ``collate``, ``batch_transform``)
    raised, or returned what cannot be batched. Not bad data: raised whatever ``on_error``
    says, from the callable's own exception (``err.__cause__``).

    Args:
        callable_name: the callable's name (``my_transform``, ``map=tokenize``).
        shard: the shard of the sample it was called on ("" for a whole batch).
        key: the sample key ("" for a whole batch).
        reason: what it raised or returned.

    ``str(err)`` is one line: ``user code: map=tokenize on shard-000012.tar/n0144_10026: KeyError: 'txt'``.
    """

    def __init__(self, callable_name: str, shard: str, key: str, reason: str) -> None:
        super().__init__(callable_name, shard, key, reason)
        self.callable_name = callable_name
        self.shard = shard
        self.key = key
        self.reason = reason

    def __str__(self) -> str:
        where = f" on {self.shard}/{self.key}" if self.shard or self.key else ""
        return f"user code: {self.callable_name}{where}: {self.reason}"


class ImageTooLarge(TurbofeedError, ValueError):
    """An image declares more pixels than the limit (:func:`turbofeed.decode.max_pixels`).

    Raised from the header, before any decode: a few KB can declare 60000 x 60000 pixels
    (10 GB and half a minute to decode). The loader counts it as a bad sample. A
    ``ValueError``, as every other undecodable image.

    Args:
        height, width: the size the header declares.
        limit: the maximum pixel count in force.
    """

    def __init__(self, height: int, width: int, limit: int) -> None:
        super().__init__(height, width, limit)
        self.height = height
        self.width = width
        self.limit = limit

    def __str__(self) -> str:
        return (f"image of {self.width}x{self.height} = {self.width * self.height} pixels is over the limit "
                f"of {self.limit} pixels (raise it with TURBOFEED_MAX_PIXELS=N or PIL.Image.MAX_IMAGE_PIXELS; "
                f"TURBOFEED_MAX_PIXELS=none: no limit)")
