"""S3 objects to and from host or GPU buffers, through :class:`~turbofeed.io.stores.client.S3Client`.

Reads: one HEAD for the size, then ranged GETs of ``max_transfer_size`` bytes,
``queue_depth`` at once. Each GET lands straight in a host buffer, or, for a GPU
buffer, in a pinned staging buffer that is then copied to the device. Object storage
has no GPUDirect path: bytes always cross host memory once.

Writes: ``S3Client.upload``, a single PUT up to ``max(max_transfer_size, 5 MiB)`` and
a multipart upload above, which is completed only when every part is stored and
aborted on any failure, so a failed write leaves no object (or the old one).
"""

from __future__ import annotations

from ..io.stores.client import S3Client
from ..io.stores.versions import ObjectInfo, etag_of
from .buffers import StagingPool
from .config import GDSConfig
from .errors import BufferTooSmallError, GDSError
from .memory import DeviceBuffer, HostBuffer
from .transfers import Transfers


class ObjectIO:
    """Object reads and writes of one client.

    Args:
        s3: the S3 client (its ``max_concurrency`` also bounds requests in flight).
        config: chunk size and depth.
        pool: staging buffers for GPU buffers.
        transfers: the client's chunk threads and in-flight bound (ranged GETs).
    """

    def __init__(self, s3: S3Client, config: GDSConfig, pool: StagingPool, transfers: Transfers) -> None:
        self.s3 = s3
        self.config = config
        self._pool = pool
        self._transfers = transfers

    def size(self, url: str) -> int:
        """The object's size in bytes (one HEAD)."""
        return self.s3.head(url).size

    def read(self, url: str, buf: HostBuffer | DeviceBuffer, offset: int = 0, size: int | None = None,
             object_size: int | None = None, etag: str | None = None) -> int:
        """Read ``size`` bytes (default: to the end) from ``offset`` into the buffer's start.

        Args:
            object_size: the object's size when already known (saves the HEAD).
            etag: the object's ETag, with ``object_size``. Every ranged GET carries it
                as ``If-Match`` (the HEAD's when it is not given), so an object replaced
                in the middle of a read fails the read instead of mixing two versions.

        Returns:
            The number of bytes read.

        Raises:
            BufferTooSmallError: the range is longer than the buffer (before any GET).
            GDSError: the range is outside the object.
            RemoteError: a request failed for good (the message names URL and range).
        """
        if object_size is None:
            expect = self.s3.head(url)
        else:
            expect = ObjectInfo(url, object_size, etag_of(etag))
        total = expect.size
        if offset < 0 or offset > total:
            raise GDSError(f"{url}: offset {offset} is outside the object ({total} bytes)")
        n = total - offset if size is None else size
        if n < 0 or offset + n > total:
            raise GDSError(f"{url}: bytes {offset}..{offset + n} asked for, but the object has {total}")
        if n > buf.nbytes:
            raise BufferTooSmallError(url, n, buf.nbytes, buf.what)

        def chunk(pos: int, k: int) -> None:
            if not buf.on_device:
                buf.view[pos:pos + k] = self.s3.get_range(url, offset + pos, offset + pos + k, expect=expect)
                return
            # GET before taking a staging buffer: the pool is held only for the short
            # memcpy + DMA, not for the network round trip.
            data = self.s3.get_range(url, offset + pos, offset + pos + k, expect=expect)
            with self._pool.acquire() as staging:
                staging.view[:k] = data
                del data
                buf.upload(pos, staging.tensor, k)
        self._transfers.run(chunk, n, self.config.max_transfer_size)
        return n

    def write(self, url: str, buf: HostBuffer | DeviceBuffer, size: int | None = None) -> int:
        """Upload the buffer's first ``size`` bytes (default: all) as the object.

        Returns:
            The number of bytes written.

        Raises:
            GDSError: ``size`` is larger than the buffer.
            RemoteError: the upload failed (and was aborted: no partial object).
        """
        n = buf.nbytes if size is None else size
        if n < 0 or n > buf.nbytes:
            raise GDSError(f"{url}: cannot write {n} bytes from a buffer of {buf.nbytes} ({buf.what})")

        def part(pos: int, k: int):
            self._transfers.check()  # upload parts run on S3Client's threads, not ours
            if not buf.on_device:
                return buf.view[pos:pos + k]
            if k <= self._pool.size:
                with self._pool.acquire() as staging:
                    buf.download(pos, staging.tensor, k)
                    return bytes(staging.view[:k])  # a copy: the staging buffer goes back now
            # S3 parts are at least 5 MiB, staging buffers may be smaller: fill the part
            # one staging buffer at a time.
            body = bytearray(k)
            for sub in range(0, k, self._pool.size):
                m = min(self._pool.size, k - sub)
                with self._pool.acquire() as staging:
                    buf.download(pos + sub, staging.tensor, m)
                    body[sub:sub + m] = staging.view[:m]
            return body
        self.s3.upload(url, n, part)
        return n


__all__ = ["ObjectIO"]
