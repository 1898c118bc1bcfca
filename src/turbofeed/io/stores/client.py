"""S3-compatible object storage: ranged reads, listings and safe uploads.

Reads (ranged GET, HEAD, LIST) go through obstore (Rust, releases the GIL) when it is
installed, else boto3; multipart uploads go through boto3, whose explicit
create/upload/complete/abort calls let us guarantee that a failed upload is aborted.
The choice was measured: see ``docs/storage.md``. Every request is retried by one
:class:`~turbofeed.io.retry.RetryPolicy` (library-level retries are off, so retries
are counted in :class:`S3Stats` and logged at debug level).

Memory bound: at most ``max_concurrency`` requests are in flight per client, a request
keeps its slot until its bytes are consumed (written to the cache file or copied out),
each holding at most ``part_size`` bytes: the client buffers < ``max_concurrency * part_size``.

Elsewhere: transfers of many parts in :mod:`.transfers`; configuration, credentials and
counters in :mod:`.config`; errors in :mod:`.errors`; versions, and read checks, in :mod:`.versions`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...redact import hide_in_library_logs, redact_url
from . import families, transfers
from .config import Auth, S3Config, S3Stats, default_config
from .errors import LocalWriteError, S3Unavailable, ShortRead, Unreachable, cannot_connect, retryable
from .versions import ObjectInfo, check_same, info_of

if TYPE_CHECKING:
    from obstore import GetOptions

log = logging.getLogger("turbofeed")

_CONNECT_TIMEOUT_S = 5.0
_FIRST_CONTACT_ATTEMPTS = 3  # connection failures tried before the endpoint ever answered
def _require(module: str):
    try:
        return __import__(module)
    except ImportError as exc:
        raise S3Unavailable(f"object store URLs (s3://, gs://, az://, https://) need the optional package {module!r}: "
                            f"pip install 'turbofeed[s3]' ({exc})") from exc


class S3Client:
    """Ranged reads, listings and atomic uploads against one S3-compatible service.

    Thread-safe; share one per process and configuration (:func:`turbofeed.io.stores.urls.shared_client`).
    ``close()`` stops retries in progress.

    Args:
        config: the :class:`S3Config` (default: :func:`default_config`).

    Raises:
        CredentialsError: the profile named by ``config.profile`` does not exist.
        S3Unavailable: neither obstore nor boto3 is installed.
    """

    def __init__(self, config: S3Config | None = None) -> None:
        self.config = config or default_config()
        self.stats = S3Stats()
        self._stop = threading.Event()
        self._slots = threading.BoundedSemaphore(self.config.max_concurrency)
        self.auth = Auth(self.config)
        self.backend = self._pick_backend()
        self._stores: dict[str, object] = {}
        self._boto = None
        self._lock = threading.Lock()
        self._reached = False  # has the endpoint ever answered?

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to (AWS's regional one when none is configured)."""
        return self.auth.endpoint or f"https://s3.{self.auth.region}.amazonaws.com"

    # ----- backends -------------------------------------------------------------------
    def _pick_backend(self) -> str:
        choice = self.config.client
        if choice == "auto":
            try:
                import obstore  # noqa: F401
                return "obstore"
            except ImportError:
                choice = "boto3"
        _require(choice)
        return choice

    def _obstore(self, kind: str) -> bool:
        """Whether URLs of store family ``kind`` are read through obstore: always but for
        ``s3://`` with ``client="boto3"`` (obstore is the only reader of the others)."""
        if kind == "s3" and self.backend != "obstore":
            return False
        if kind != "s3" and self.backend != "obstore":
            _require("obstore")
        return True

    def _store(self, kind: str, root: str):
        """The obstore store of one bucket, container or HTTP host (made once; raises
        CredentialsError)."""
        with self._lock:
            store = self._stores.get(root)
            if store is None:
                store = self._stores[root] = self._make_store(kind, root)
            return store

    def obstore_store(self, url: str):
        """The obstore store that reads ``url``'s bucket, container or host (for libraries
        that take one, e.g. zarr's ObjectStore)."""
        kind, root, _ = families.split_url(url)
        return self._store(kind, root)

    def endpoint_of(self, url: str) -> str:
        """The service a URL's requests go to (for messages)."""
        kind, root, _ = families.split_url(url)
        return families.STORES[kind].endpoint(self, root)

    def _make_store(self, kind: str, root: str):
        return families.STORES[kind].make(self, root, min(_CONNECT_TIMEOUT_S, self.config.timeout))

    def make_s3(self, bucket: str):
        """The obstore ``S3Store`` of one bucket, with this client's credentials (the
        ``s3`` row of :data:`~turbofeed.io.stores.families.STORES`)."""
        from obstore.store import S3Store

        a = self.auth
        kwargs: dict = {"region": a.region}
        if a.endpoint:
            kwargs["endpoint"] = a.endpoint
        if a.anonymous:
            kwargs["skip_signature"] = True
        elif a.key:
            kwargs.update(access_key_id=a.key, secret_access_key=a.secret)
            if a.token:
                kwargs["token"] = a.token
        elif a.session is not None:
            from obstore.auth.boto3 import Boto3CredentialProvider

            a.credentials()  # fail now, clearly, rather than on every request
            kwargs["credential_provider"] = Boto3CredentialProvider(a.session)
        options = families.client_options(self.config.timeout, min(_CONNECT_TIMEOUT_S, self.config.timeout),
                                        self.config.max_concurrency, a.endpoint)
        return S3Store(bucket, client_options=options, retry_config={"max_retries": 0}, **kwargs)

    def boto3_client(self):
        """The boto3 client (library retries off), created on first use.

        Raises:
            CredentialsError: no credentials were found and the client is not anonymous.
        """
        with self._lock:
            if self._boto is None:
                boto3 = _require("boto3")
                import botocore
                from botocore.config import Config

                a = self.auth
                options = dict(max_pool_connections=self.config.max_concurrency + 4,
                               # total_max_attempts counts the first try; botocore's "max_attempts" key
                               # counts retries, so {"max_attempts": 1} would retry once, unseen.
                               retries={"total_max_attempts": 1, "mode": "standard"},
                               connect_timeout=min(_CONNECT_TIMEOUT_S, self.config.timeout),
                               read_timeout=self.config.timeout,
                               request_checksum_calculation="when_required",
                               response_checksum_validation="when_required")
                creds = {}
                hide_in_library_logs(a.secret, a.token)  # botocore logs headers at DEBUG level
                if a.anonymous:
                    options["signature_version"] = botocore.UNSIGNED
                elif a.key:
                    creds = dict(aws_access_key_id=a.key, aws_secret_access_key=a.secret,
                                 aws_session_token=a.token)
                else:
                    a.credentials()
                if a.endpoint:
                    options["s3"] = {"addressing_style": "path"}
                session = a.session or boto3.session.Session()
                self._boto = session.client("s3", endpoint_url=a.endpoint, region_name=a.region,
                                            config=Config(**options), **creds)
            return self._boto

    # ----- plumbing ------------------------------------------------------------------
    def _call(self, fn: Callable, what: str, url: str | None = None):
        """Run one request (to ``url``'s store) under a concurrency slot, retried by the
        config's policy."""
        refused = 0

        def once():
            nonlocal refused
            with self._slots:
                self.stats.add(requests=1)
                try:
                    out = fn()
                except Exception as exc:
                    if not cannot_connect(exc):
                        self._reached = True
                    elif not self._reached:
                        # A wrong endpoint should fail in a second, not after the whole
                        # retry policy; once it has answered, outages are ridden out.
                        refused += 1
                        if refused >= _FIRST_CONTACT_ATTEMPTS:
                            raise Unreachable(
                                f"cannot connect to {redact_url(self.endpoint_of(url) if url else self.endpoint)} "
                                f"({refused} attempts; check {families.STORES[families.family(url) if url else 's3'].where})") from exc
                    raise
            self._reached = True
            return out
        return self.config.retry.call(once, what=what, retryable=retryable,
                                      on_retry=self.stats.retried, stop=self._stop)

    # ----- reads ----------------------------------------------------------------------
    def head(self, url: str) -> ObjectInfo:
        """Size and version of one object (RemoteError from FileNotFoundError if missing)."""
        kind, root, key = families.split_url(url)
        if self._obstore(kind):
            import obstore

            store = self._store(kind, root)
            meta = self._call(lambda: obstore.head(store, key), f"HEAD {url}", url)
            return info_of(url, int(meta["size"]), meta.get("e_tag"), meta.get("last_modified"))
        s3 = self.boto3_client()
        meta = self._call(lambda: s3.head_object(Bucket=root[5:], Key=key), f"HEAD {url}", url)
        return info_of(url, int(meta["ContentLength"]), meta.get("ETag"), meta.get("LastModified"))

    def list(self, url: str) -> list[ObjectInfo]:
        """Objects whose URL starts with ``url`` (a folder when it ends with ``/``), sorted.

        Raises:
            ValueError: an ``http(s)://`` URL (HTTP servers have no listing).
        """
        kind, root, prefix = families.split_url(url)
        if kind == "http":
            raise ValueError(f"{url}: an HTTP server cannot be listed: name the shards "
                             "(a list, or a brace pattern such as shard-{000..099}.tar)")
        out: list[ObjectInfo] = []
        if self._obstore(kind):
            import obstore

            store = self._store(kind, root)
            folder = prefix[:prefix.rfind("/") + 1]  # obstore lists whole path segments

            def run():
                found = []
                for chunk in obstore.list(store, folder or None, chunk_size=1000):
                    found.extend(chunk)
                return found
            for meta in self._call(run, f"LIST {url}", url):
                if meta["path"].startswith(prefix):
                    out.append(info_of(f"{root}/{meta['path']}", int(meta["size"]), meta.get("e_tag"), meta.get("last_modified")))
        else:
            s3 = self.boto3_client()

            def run():
                pages = s3.get_paginator("list_objects_v2").paginate(Bucket=root[5:], Prefix=prefix)
                return [o for page in pages for o in page.get("Contents", [])]
            for obj in self._call(run, f"LIST {url}", url):
                out.append(info_of(f"{root}/{obj['Key']}", int(obj["Size"]), obj.get("ETag"), obj.get("LastModified")))
        out.sort(key=lambda o: o.url)
        return out

    def get_range(self, url: str, start: int, end: int, *, expect: ObjectInfo | None = None,
                  sink: Callable[[memoryview], None] | None = None) -> memoryview:
        """Bytes ``[start, end)`` of the object, exactly ``end - start`` of them.

        Args:
            expect: the version to read (checked as :mod:`.versions` says): a replaced object
                fails (final, see :func:`changed`) instead of returning bytes of another version.
            sink: called with the bytes while the request still holds its concurrency
                slot (so buffered bytes stay bounded); its ``OSError`` is final.
        """
        if end <= start:
            return memoryview(b"")
        kind, root, key = families.split_url(url)
        want = end - start
        if self._obstore(kind):
            import obstore

            store = self._store(kind, root)
            options: GetOptions = {"range": (start, end)}
            if expect is not None and expect.etag:  # else checked below (a weak ETag never matches)
                options["if_match"] = f'"{expect.etag}"'

            def request() -> memoryview:
                if expect is None:
                    return memoryview(obstore.get_range(store, key, start=start, end=end))
                result = obstore.get(store, key, options=options)
                check_same(expect, int(result.meta["size"]), result.meta.get("last_modified"))
                return memoryview(result.bytes())
        else:
            s3 = self.boto3_client()
            extra = {"IfMatch": f'"{expect.etag}"'} if expect is not None and expect.etag else {}

            def request() -> memoryview:
                body = s3.get_object(Bucket=root[5:], Key=key, Range=f"bytes={start}-{end - 1}",
                                     **extra)["Body"]
                try:
                    return memoryview(body.read())
                finally:
                    body.close()

        def fetch() -> memoryview:
            data = request()
            if len(data) != want:
                raise ShortRead(f"got {len(data)} of {want} bytes")
            self.stats.add(bytes_read=want)
            if sink is not None:
                try:
                    sink(data)
                except OSError as exc:
                    raise LocalWriteError(f"cannot store the bytes locally: {exc}") from exc
            return data
        return self._call(fetch, f"{url} bytes {start}-{end - 1}", url)

    # ----- transfers of many parts (bodies in :mod:`turbofeed.io.stores.transfers`) -----------
    def read_into(self, url: str, offset: int, out: memoryview) -> None:
        """Fill ``out`` with the object's bytes from ``offset``: ``part_size`` bytes per
        ranged GET, up to ``max_concurrency`` GETs at once."""
        transfers.read_into(self, url, offset, out)

    def download_to(self, url: str, size: int, fd: int, stop: threading.Event | None = None,
                    *, expect: ObjectInfo | None = None, start: int = 0) -> None:
        """Write the whole object (``size`` bytes), or its bytes ``[start, start + size)``,
        into the open file ``fd`` at offsets ``0 .. size - 1`` (``pwrite``), ``part_size``
        bytes per ranged GET, up to ``max_concurrency`` at once.

        Args:
            expect: the version expected (checked on every part, as by :meth:`get_range`),
                so a copy is never stitched together from two versions of an object.
            start: the object's offset of the first byte (a piece of a shard, streaming).

        Raises:
            InterruptedError: ``stop`` was set (the file is incomplete).
            RemoteError: a part failed for good.
        """
        transfers.download_to(self, url, size, fd, stop, expect=expect, start=start)

    # ----- writes ---------------------------------------------------------------------
    def upload(self, url: str, size: int, read_part: Callable[[int, int], memoryview]) -> str:
        """Upload ``size`` bytes, ``read_part(offset, n)`` supplying them; returns the ETag.

        At most ``part_size`` bytes (5 MiB at least) go in one PUT; larger objects go as
        a multipart upload that is completed only when every part is stored, and aborted
        on any failure (the object then does not exist, or keeps its old content).

        Raises:
            RemoteError: a request failed for good (after the abort).
        """
        return transfers.upload(self, url, size, read_part)

    def put(self, url: str, data) -> str:
        """Upload a bytes-like object (see :meth:`upload`); returns the ETag."""
        view = memoryview(data).cast("B")
        return self.upload(url, len(view), lambda pos, n: view[pos:pos + n])

    def delete(self, url: str) -> None:
        kind, root, key = families.split_url(url)
        if kind != "s3":
            import obstore

            store = self._store(kind, root)
            self._call(lambda: obstore.delete(store, key), f"DELETE {url}", url)
            return
        s3 = self.boto3_client()
        self._call(lambda: s3.delete_object(Bucket=root[5:], Key=key), f"DELETE {url}", url)

    def close(self) -> None:
        """Stop retry waits (requests in progress fail); idempotent."""
        self._stop.set()

    def __enter__(self) -> S3Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["S3Client"]
