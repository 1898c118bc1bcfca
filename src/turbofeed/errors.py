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
