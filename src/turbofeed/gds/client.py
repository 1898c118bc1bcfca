"""``GPUDirectClient``: objects and local files to and from GPU (or host) buffers."""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..base.executor import Executor, ExecutorClosed
from ..io.stores.client import S3Client
from ..io.stores.config import S3Config, parse_url
from .buffers import StagingPool
from .config import GDSConfig, LoadedConfig, load_config
from .errors import GDSError
from .files import FileIO
from .memory import DeviceBuffer, HostBuffer, as_buffer
from .objects import ObjectIO
from .transfers import Transfers

log = logging.getLogger("turbofeed")
_P2P_WARNED: set[tuple[int, int]] = set()


class GPUDirectClient:
    """Moves S3 objects and local files into and out of GPU memory (or host memory).

    Local files go by cuFile (GPUDirect Storage, through KvikIO) when it is installed
    and ``config.enabled``, else through pinned staging buffers; objects always go by
    ranged GETs through pinned staging (object storage has no GPUDirect path). Host
    buffers skip staging: reads land straight in them. ``turbofeed gds-status`` says
    which path this machine takes and why; see ``docs/gds.md``.

    Bounds: transfers in flight <= ``queue_depth``; pinned staging memory <=
    ``buffer_pool_size``; async operations running <= ``queue_depth`` (more wait).

    Thread-safe. Chunks run on ``turbofeed-gds-<i>`` threads, async operations on
    ``turbofeed-gds-op-<i>`` (each a :class:`~turbofeed.base.executor.Executor`, started
    at first use). ``close()`` (or leaving ``with``) cancels queued async operations,
    stops transfers between chunks and frees the staging memory.

    Args:
        endpoint: S3 endpoint URL (``http://127.0.0.1:9000``); default: the AWS
            variables/profile, as :class:`~turbofeed.io.stores.config.S3Config` documents.
        access_key, secret_key: static S3 credentials; default: the AWS chain.
        region: signing region.
        config: a :class:`GDSConfig` (used as given), a YAML path, or None for
            ``$TURBOFEED_GDS_CONFIG`` and the ``TURBOFEED_GDS_*`` variables.
        s3_config: a full :class:`S3Config` (retries, timeouts, profile) instead of the
            endpoint/key arguments; its concurrency and part size are used as given.

    Example::

        with GPUDirectClient("http://127.0.0.1:9000", "key", "secret") as client:
            size = client.object_size("bucket", "weights.bin")
            out = torch.empty(size, dtype=torch.uint8, device="cuda")
            client.read_to_gpu("bucket", "weights.bin", out)
            client.write_file_from_gpu("/nvme/weights.bin", out)
    """

    def __init__(self, endpoint: str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, *, region: str | None = None,
                 config: GDSConfig | str | os.PathLike | None = None,
                 s3_config: S3Config | None = None) -> None:
        if isinstance(config, GDSConfig):
            self.loaded = LoadedConfig(config, {k: "argument" for k in config.__dataclass_fields__})
        else:
            self.loaded = load_config(config)
        self.config = cfg = self.loaded.config
        self.s3_config = s3_config or S3Config(
            endpoint_url=endpoint, access_key_id=access_key, secret_access_key=secret_key, region=region,
            max_concurrency=cfg.queue_depth, part_size=cfg.max_transfer_size)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.pool = StagingPool(cfg.staging_buffers, cfg.max_transfer_size)
        self._transfers = Transfers(cfg.queue_depth, self._stop)
        self._ops = Executor(cfg.queue_depth, "gds-op") if cfg.enable_async else None
        self._s3: list[S3Client] = []  # filled on first S3 use; a list so the finalizer sees it
        self._objects: ObjectIO | None = None
        self.files = FileIO(cfg, self.pool, self._transfers)
        self._finalizer = weakref.finalize(self, _close, self.pool, self._transfers, self._ops, self._s3)
        if cfg.enable_p2p:
            _check_p2p(cfg.device_ids)

    # ----- S3 objects -----------------------------------------------------------------
    @property
    def objects(self) -> ObjectIO:
        """The S3 side, created on first use (so file-only use needs no S3 library)."""
        with self._lock:
            if self._stop.is_set():
                raise GDSError("the client is closed")
            if self._objects is None:
                self._s3.append(S3Client(self.s3_config))
                self._objects = ObjectIO(self._s3[0], self.config, self.pool, self._transfers)
            return self._objects

    def object_size(self, bucket: str, key: str) -> int:
        """Size in bytes of ``s3://bucket/key`` (one HEAD), to size a buffer before a read."""
        return self.objects.size(_url(bucket, key))

    def read_to_gpu(self, bucket: str, key: str, buffer: Any, *, offset: int = 0,
                    size: int | None = None) -> int:
        """Read ``s3://bucket/key`` (bytes ``[offset, offset + size)``, default: all from
        ``offset``) into the start of ``buffer``.

        Args:
            buffer: CUDA memory (torch, CuPy, any ``__cuda_array_interface__``/DLPack
                object) or host memory (NumPy, CPU tensor, bytearray, memoryview);
                contiguous, writable; its bytes past the read are left as they were.

        Returns:
            The number of bytes read.

        Raises:
            BufferTooSmallError: the buffer is smaller than the range (nothing is read).
            RemoteError: no such object, access denied, or a request that kept failing.
            GDSError: a buffer that cannot be used, a device outside ``device_ids``.
        """
        return self.objects.read(_url(bucket, key), self._buffer(buffer, writable=True), offset, size)

    def read_url(self, url: str, buffer: Any, *, offset: int = 0, size: int | None = None,
                 object_size: int | None = None, etag: str | None = None) -> int:
        """:meth:`read_to_gpu` for an ``s3://bucket/key`` URL; ``object_size`` and ``etag``,
        when known (from a listing), save the HEAD request."""
        parse_url(url)
        buf = self._buffer(buffer, writable=True)
        return self.objects.read(url, buf, offset, size, object_size, etag)

    def write_from_gpu(self, bucket: str, key: str, buffer: Any, *, size: int | None = None) -> int:
        """Write ``buffer`` (its first ``size`` bytes, default all) as ``s3://bucket/key``.

        The object appears whole or not at all: a multipart upload is aborted on failure.

        Returns:
            The number of bytes written.

        Raises:
            RemoteError: the upload failed (no partial object is left).
        """
        return self.objects.write(_url(bucket, key), self._buffer(buffer, writable=False), size)

    def async_read(self, bucket: str, key: str, buffer: Any, *, offset: int = 0,
                   size: int | None = None) -> Future:
        """:meth:`read_to_gpu` on the client's threads; the future gives the byte count.

        Argument errors (a bad buffer) raise here; transfer errors come from the future.
        Do not touch ``buffer`` until the future is done."""
        url, buf = _url(bucket, key), self._buffer(buffer, writable=True)
        return self._submit(self.objects.read, url, buf, offset, size)

    def async_write(self, bucket: str, key: str, buffer: Any, *, size: int | None = None) -> Future:
        """:meth:`write_from_gpu` on the client's threads; the future gives the byte count.

        Do not change ``buffer`` until the future is done."""
        url, buf = _url(bucket, key), self._buffer(buffer, writable=False)
        return self._submit(self.objects.write, url, buf, size)

    # ----- local files ----------------------------------------------------------------
    def read_file_to_gpu(self, path: str | os.PathLike, buffer: Any, offset: int = 0,
                         size: int | None = None) -> int:
        """Read a local file (bytes ``[offset, offset + size)``, default: to the end) into
        the start of ``buffer`` (see :meth:`read_to_gpu` for buffers).

        Returns:
            The number of bytes read.

        Raises:
            BufferTooSmallError: the buffer is smaller than the range (nothing is read).
            OSError: the file cannot be opened.
        """
        return self.files.read(os.fspath(path), self._buffer(buffer, writable=True), offset, size)

    def write_file_from_gpu(self, path: str | os.PathLike, buffer: Any, size: int | None = None) -> int:
        """Replace a local file with ``buffer`` (its first ``size`` bytes, default all).

        Written to a temporary name in the same folder, fsynced, then renamed: the file
        is the old one or the whole new one, never a part, and a failure leaves no file.

        Returns:
            The number of bytes written.
        """
        return self.files.write(os.fspath(path), self._buffer(buffer, writable=False), size)

    def async_read_file(self, path: str | os.PathLike, buffer: Any, offset: int = 0,
                        size: int | None = None) -> Future:
        """:meth:`read_file_to_gpu` on the client's threads; the future gives the byte count."""
        buf = self._buffer(buffer, writable=True)
        return self._submit(self.files.read, os.fspath(path), buf, offset, size)

    def async_write_file(self, path: str | os.PathLike, buffer: Any, size: int | None = None) -> Future:
        """:meth:`write_file_from_gpu` on the client's threads; the future gives the byte count."""
        buf = self._buffer(buffer, writable=False)
        return self._submit(self.files.write, os.fspath(path), buf, size)

    def file_method(self, buffer: Any) -> str:
        """How a local file would move to/from ``buffer``: ``host``, ``kvikio`` or ``staged``."""
        return self.files.method(as_buffer(buffer, writable=False))

    # ----- plumbing -------------------------------------------------------------------
    def _buffer(self, buffer: Any, writable: bool) -> HostBuffer | DeviceBuffer:
        if self._stop.is_set():
            raise GDSError("the client is closed")
        buf = as_buffer(buffer, writable=writable)
        if buf.on_device:
            ids = self.config.device_ids
            if ids and buf.device_index not in ids:
                raise GDSError(f"the buffer ({buf.what}) is on cuda:{buf.device_index}, but the GDS "
                               f"config allows devices {list(ids)} "
                               f"({self.loaded.sources.get('device_ids', 'argument')})")
            buf.mark_ready()  # in the caller's thread: its current stream is the one to wait for
        return buf

    def _submit(self, fn: Callable[..., int], *args: Any) -> Future:
        """Run ``fn(*args)`` on the op threads. The buffer in ``args`` was wrapped in the
        caller's thread, so its readiness event sits on the caller's CUDA stream."""
        if self._ops is not None:
            try:
                return self._ops.submit(fn, *args)
            except ExecutorClosed as exc:  # closed since _buffer() looked
                raise GDSError("the client is closed") from exc
        future: Future = Future()  # enable_async=False: run now, hand back a finished future
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - delivered through the future, as async would
            future.set_exception(exc)
        return future

    def stats(self) -> dict:
        """Staging pool use and, once S3 was used, the S3 client's counters."""
        out: dict = {"staging": self.pool.stats()}
        if self._s3:
            out["s3"] = self._s3[0].stats.as_dict()
        return out

    def close(self) -> None:
        """Cancel queued async operations, stop transfers between chunks, free staging
        memory; idempotent. Running chunks finish first (at most ~one chunk each)."""
        self._finalizer()

    def __enter__(self) -> GPUDirectClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _url(bucket: str, key: str) -> str:
    if not bucket or "/" in bucket:
        raise GDSError(f"bad bucket name {bucket!r} (pass the bucket and the key separately)")
    if not key:
        raise GDSError(f"empty object key in bucket {bucket!r}")
    return f"s3://{bucket}/{key}"


def _close(pool: StagingPool, transfers: Transfers, ops: Executor | None, s3: list[S3Client]) -> None:
    for s3_client in s3:
        s3_client.close()  # ends retry waits, so running chunks fail fast
    transfers.close()  # sets the stop event first: chunks not started fail at once
    if ops is not None:
        ops.close()
    pool.close()


def _check_p2p(device_ids: tuple[int, ...]) -> None:
    """Warn once per pair of devices that cannot reach each other's memory directly."""
    from ..torch.device import gpu_available

    if not gpu_available():
        return
    import torch

    ids = list(device_ids) or list(range(torch.cuda.device_count()))
    for a in ids:
        for b in ids:
            if a != b and (a, b) not in _P2P_WARNED and not torch.cuda.can_device_access_peer(a, b):
                _P2P_WARNED.add((a, b))
                log.warning("turbofeed: enable_p2p is set, but cuda:%d cannot access cuda:%d directly "
                            "(copies between them go through host memory); see turbofeed gds-status", a, b)


__all__ = ["GPUDirectClient"]
