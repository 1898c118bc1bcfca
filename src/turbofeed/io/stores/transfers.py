"""Transfers of many parts: whole objects into memory or a file with parallel ranged GETs,
and uploads (one PUT, or a multipart upload that is completed or aborted, never left half).

The parts of one call run on an :class:`~turbofeed.base.executor.Executor` of up to
``max_concurrency`` threads (``turbofeed-s3-fetch-<i>``) made for that call and closed
when it returns; the client's concurrency slots still bound the requests in flight
across all calls (see :mod:`turbofeed.io.stores.client`). These are the bodies of
:meth:`S3Client.read_into`, :meth:`S3Client.download_to` and :meth:`S3Client.upload`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...base.executor import Executor
from ..retry import RemoteError
from .config import parse_url
from .families import split_url
from .versions import etag_of

if TYPE_CHECKING:
    from .client import S3Client
    from .versions import ObjectInfo

log = logging.getLogger("turbofeed")

_MIN_PART = 5 << 20          # S3's smallest multipart part (all but the last)
_MAX_PARTS = 10_000


def run_parts(fn: Callable[[int], None], positions: range, max_concurrency: int) -> None:
    """Run ``fn(pos)`` for every position on up to ``max_concurrency`` threads of this
    call (gone when it returns); the first error cancels the parts not yet started and
    is raised once the running ones are done."""
    starts = list(positions)
    if len(starts) <= 1:
        for pos in starts:
            fn(pos)
        return
    parts = Executor(min(len(starts), max_concurrency), "s3-fetch")
    try:
        parts.run_all(fn, starts)
    finally:
        parts.close()


def read_into(client: S3Client, url: str, offset: int, out: memoryview) -> None:
    """See :meth:`S3Client.read_into`."""
    total = len(out)
    part = client.config.part_size

    def one(pos: int) -> None:
        n = min(part, total - pos)

        def copy(data: memoryview) -> None:
            out[pos:pos + n] = data
        client.get_range(url, offset + pos, offset + pos + n, sink=copy)
    run_parts(one, range(0, total, part), client.config.max_concurrency)


def download_to(client: S3Client, url: str, size: int, fd: int, stop: threading.Event | None = None,
                *, expect: ObjectInfo | None = None, start: int = 0) -> None:
    """See :meth:`S3Client.download_to`."""
    part = client.config.part_size

    def one(pos: int) -> None:
        if stop is not None and stop.is_set():
            raise InterruptedError(f"{url}: download stopped")

        def write(data: memoryview) -> None:
            done = 0
            while done < len(data):
                done += os.pwrite(fd, data[done:], pos + done)
        client.get_range(url, start + pos, start + min(size, pos + part), expect=expect, sink=write)
    run_parts(one, range(0, size, part), client.config.max_concurrency)


def upload(client: S3Client, url: str, size: int, read_part: Callable[[int, int], memoryview]) -> str:
    """See :meth:`S3Client.upload`."""
    kind, root, key = split_url(url)
    if kind != "s3":
        return _put_obstore(client, kind, root, key, url, size, read_part)
    bucket, key = parse_url(url)
    s3 = client.boto3_client()
    call, stats = client._call, client.stats
    if size <= max(client.config.part_size, _MIN_PART):
        body = bytes(read_part(0, size))
        out = call(lambda: s3.put_object(Bucket=bucket, Key=key, Body=body), f"PUT {url}")
        stats.add(bytes_written=size)
        return etag_of(out.get("ETag"))
    part = max(client.config.part_size, _MIN_PART, -(-size // _MAX_PARTS))
    upload_id = call(lambda: s3.create_multipart_upload(Bucket=bucket, Key=key),
                     f"CreateMultipartUpload {url}")["UploadId"]
    etags: dict[int, str] = {}
    try:
        def one(pos: int) -> None:
            n = min(part, size - pos)
            number = pos // part + 1
            body = bytes(read_part(pos, n))
            out = call(lambda: s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id,
                                              PartNumber=number, Body=body),
                       f"UploadPart {number} of {url} bytes {pos}-{pos + n - 1}")
            etags[number] = out["ETag"]
            stats.add(bytes_written=n)
        run_parts(one, range(0, size, part), client.config.max_concurrency)
        parts = [{"PartNumber": n, "ETag": etags[n]} for n in sorted(etags)]
        out = call(lambda: s3.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}),
            f"CompleteMultipartUpload {url}")
        return etag_of(out.get("ETag"))
    except BaseException:
        try:
            call(lambda: s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id),
                 f"AbortMultipartUpload {url}")
        except RemoteError as exc:
            log.warning("turbofeed: could not abort the multipart upload %s of %s: %s "
                        "(a bucket lifecycle rule removes it later)", upload_id, url, exc)
        raise


def _put_obstore(client: S3Client, kind: str, root: str, key: str, url: str, size: int,
                 read_part: Callable[[int, int], memoryview]) -> str:
    """One PUT through obstore (GCS, Azure: an object appears whole or not at all)."""
    if kind == "http":
        raise RemoteError(f"{url}: HTTP stores are read-only here (write the index to a file or "
                          "another store and pass index=...)")
    import obstore

    store = client._store(kind, root)
    body = bytes(read_part(0, size))
    out = client._call(lambda: obstore.put(store, key, body, use_multipart=False), f"PUT {url}", url)
    client.stats.add(bytes_written=size)
    return etag_of(out.get("e_tag"))
