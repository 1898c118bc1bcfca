"""Errors of the GPUDirect-style client: each names the object, file or setting at fault."""

from __future__ import annotations

from ..errors import TurbofeedError


class GDSError(TurbofeedError):
    """A transfer between storage and a buffer could not be done as asked.

    The message names the ``s3://bucket/key`` or file path, and the buffer.
    """


class BufferTooSmallError(GDSError, ValueError):
    """The buffer holds fewer bytes than the object or file range to read.

    ``str(err)``: ``s3://data/x.bin: 1048576 bytes to read, but the buffer
    (torch.Tensor uint8 cuda:0) holds 4096``. ``needed`` and ``available`` carry the sizes.
    """

    def __init__(self, where: str, needed: int, available: int, buffer: str) -> None:
        super().__init__(f"{where}: {needed} bytes to read, but the buffer ({buffer}) holds {available}")
        self.where = where
        self.needed = needed
        self.available = available


class GDSConfigError(GDSError, ValueError):
    """A GDS setting is unknown or has a bad value; the message names the key and its source.

    ``str(err)``: ``gds config: max_transfer_size: must be a size > 0 like '16M', got '0x'
    (env TURBOFEED_GDS_MAX_TRANSFER_SIZE)``.
    """

    def __init__(self, key: str, reason: str, source: str | None = None) -> None:
        where = f" ({source})" if source else ""
        super().__init__(f"gds config: {key}: {reason}{where}")
        self.key = key
        self.source = source
