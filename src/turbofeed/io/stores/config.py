"""Configuration, credentials, counters and object metadata of the S3 client
(:mod:`turbofeed.io.stores.client`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ...base.counters import Counters
from ...redact import Redacted, mask, mask_key, redact_url
from ...units import parse_size
from ..retry import RemoteError, RetryPolicy
from .families import AzureConfig, GCSConfig, HTTPConfig, check_endpoint
from .versions import ObjectInfo, etag_of  # noqa: F401 - where they were always imported from

#: The node cache's size bound when :attr:`S3Config.cache_max_bytes` is None (``200G``).
CACHE_SIZE_ENV = "TURBOFEED_S3_CACHE_SIZE"


class CredentialsError(RemoteError):
    """No usable credentials: none found, or the named profile does not exist.

    Final (never retried): waiting does not create credentials.
    """


def parse_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/key`` -> ``("bucket", "some/key")``."""
    if not url.startswith("s3://"):
        raise ValueError(f"{url}: not an s3:// URL")
    bucket, _, key = url[5:].partition("/")
    if not bucket:
        raise ValueError(f"{url}: no bucket in the URL")
    return bucket, key


@dataclass(frozen=True, repr=False)
class S3Config(Redacted):
    """Where the bucket is, who we are, and how hard to push.

    Unset fields come from the usual AWS sources, in boto3's order: the arguments,
    ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``/
    ``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
    then the profile (``profile`` or ``AWS_PROFILE``, from ``~/.aws/config`` and
    ``~/.aws/credentials``, SSO and instance roles included through boto3). As in boto3,
    ``profile=`` wins over the ``AWS_ACCESS_KEY_ID`` variables and ``AWS_PROFILE`` does not.

    Example::

        S3Config(endpoint_url="http://127.0.0.1:9000", access_key_id="minio",
                 secret_access_key="minio123", max_concurrency=32)

    Args:
        endpoint_url: e.g. ``http://127.0.0.1:9000`` for MinIO or a test server.
        region: signing region (default ``us-east-1``).
        access_key_id, secret_access_key, session_token: static credentials.
        profile: an AWS profile name.
        anonymous: unsigned requests (public buckets).
        client: ``"auto"`` (obstore if installed, else boto3), ``"obstore"`` or ``"boto3"``
            for reads; uploads always use boto3.
        max_concurrency: requests in flight per client (sample reads, shard parts, uploads).
        part_size: bytes per ranged GET of a whole-shard download and per multipart part.
        prefetch_shards: whole shards downloading into the node cache at once, ahead of
            use; 0 turns prefetch off.
        cache_max_bytes: size bound of the node-local shard cache (default
            ``$TURBOFEED_S3_CACHE_SIZE``, e.g. ``200G``, else half the free space).
        timeout: seconds for one request (connecting takes at most 5 s of it).
        retry: the retry policy of every request. Until the endpoint has answered once,
            a refused or timed-out connection is tried only 3 times, so a wrong endpoint
            fails in about a second instead of riding out the whole policy.
        gcs, azure, http: how ``gs://``, ``az://`` and ``http(s)://`` URLs are reached
            (:class:`turbofeed.GCSConfig`, :class:`turbofeed.AzureConfig`,
            :class:`turbofeed.HTTPConfig`; default: their ecosystem's variables). The
            limits, cache and retry fields above serve every store.

    Its ``repr``/``str`` show the secret key as ``'****'`` and its last 4 characters and
    the session token as ``'****'`` (:mod:`turbofeed.redact`); equality, hashing and
    pickling use the real values, so a pickled config (and a pickled loader) carries
    them: credentials from the ``AWS_*`` variables or a profile stay out of pickles.
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    profile: str | None = None
    anonymous: bool = False
    client: str = "auto"
    max_concurrency: int = 16
    part_size: int = 8 << 20
    prefetch_shards: int = 2
    cache_max_bytes: int | None = None
    timeout: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    gcs: GCSConfig | None = None
    azure: AzureConfig | None = None
    http: HTTPConfig | None = None

    _HIDDEN: ClassVar[Mapping[str, Callable[[Any], Any]]] = {
        "secret_access_key": mask_key, "session_token": mask, "endpoint_url": redact_url}

    def __post_init__(self) -> None:
        check_endpoint(self.endpoint_url, "S3Config(endpoint_url=...)")
        if self.client not in ("auto", "obstore", "boto3"):
            raise ValueError(f"client must be 'auto', 'obstore' or 'boto3', got {self.client!r}")
        if self.max_concurrency < 1 or self.part_size < 1 or self.prefetch_shards < 0:
            raise ValueError(f"bad S3Config limits: max_concurrency={self.max_concurrency}, "
                             f"part_size={self.part_size}, prefetch_shards={self.prefetch_shards}")


_DEFAULT = S3Config()
_DEFAULT_LOCK = threading.Lock()


def configure(config: S3Config | None = None, **changes: Any) -> S3Config:
    """Set the process-wide default :class:`S3Config` (used when a dataset is given none).

    ``configure(endpoint_url="http://127.0.0.1:9000", max_concurrency=32)`` changes
    those fields of the current default; ``configure(S3Config())`` resets it.
    Returns the new default.
    """
    global _DEFAULT
    with _DEFAULT_LOCK:
        _DEFAULT = replace(config or _DEFAULT, **changes)
        return _DEFAULT


def default_config() -> S3Config:
    return _DEFAULT


def cache_limit(config: S3Config) -> int | None:
    """The node cache's size bound: ``config.cache_max_bytes``, else ``$TURBOFEED_S3_CACHE_SIZE``
    (``"200G"``, see :func:`turbofeed.units.parse_size`), else None (half the free space).

    Raises:
        turbofeed.units.SizeError: the variable holds no size (the message names it).
    """
    if config.cache_max_bytes is not None:
        return config.cache_max_bytes
    raw = os.environ.get(CACHE_SIZE_ENV)
    return None if raw is None else parse_size(raw, CACHE_SIZE_ENV, f"env {CACHE_SIZE_ENV}", minimum=0)


def _count(name: str) -> property:
    return property(lambda self: self._counts.get(name), doc=f"the ``{name}`` count")


class S3Stats:
    """Counters of one client (thread-safe); ``as_dict()`` gives a JSON-safe copy.

    Attributes:
        requests: requests sent, retries included.
        bytes_read: payload bytes received.
        bytes_written: payload bytes uploaded.
        retries: requests sent again after a retryable error.
        retry_reasons: retries by error type (``GenericError``, ``ConnectionError`` ...).
        cache_hits, cache_misses: sample reads served by the node cache or by a GET.
        shards_downloaded: whole shards fetched into the cache (by this process).
        pieces_downloaded: pieces of shards fetched into the cache (streaming, by this process).
        evictions: cache files removed to stay within the size bound.
    """

    NAMES = ("requests", "bytes_read", "bytes_written", "retries", "cache_hits", "cache_misses",
             "shards_downloaded", "pieces_downloaded", "evictions")

    requests = _count("requests")
    bytes_read = _count("bytes_read")
    bytes_written = _count("bytes_written")
    retries = _count("retries")
    cache_hits = _count("cache_hits")
    cache_misses = _count("cache_misses")
    shards_downloaded = _count("shards_downloaded")
    pieces_downloaded = _count("pieces_downloaded")
    evictions = _count("evictions")

    def __init__(self) -> None:
        self._counts = Counters(*self.NAMES)

    def add(self, **counts: int) -> None:
        self._counts.add_many(**counts)

    def retried(self, exc: BaseException) -> None:
        self._counts.add("retries", reason=type(exc).__name__)

    @property
    def retry_reasons(self) -> dict[str, int]:
        return self._counts.reasons("retries")

    def as_dict(self) -> dict:
        return self._counts.as_dict(retry_reasons="retries")

    def __repr__(self) -> str:
        return f"S3Stats({self.as_dict()})"


class Auth:
    """Endpoint, region and credentials of one :class:`S3Config` after looking at the
    arguments, the ``AWS_*`` variables and the profile (boto3's order).

    ``key``/``secret``/``token`` are set for static credentials (arguments or
    variables); otherwise ``session`` is the boto3 session whose credential chain
    (profile, SSO, container and instance roles) signs the requests.

    Raises:
        CredentialsError: the named profile does not exist.
    """

    def __init__(self, config: S3Config) -> None:
        env = os.environ
        self.anonymous = config.anonymous
        self.endpoint = (config.endpoint_url or env.get("AWS_ENDPOINT_URL_S3")
                         or env.get("AWS_ENDPOINT_URL"))
        try:
            check_endpoint(self.endpoint, "AWS_ENDPOINT_URL_S3/AWS_ENDPOINT_URL")
        except ValueError as exc:
            raise CredentialsError(str(exc)) from None
        self.region = config.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        self.profile = config.profile or env.get("AWS_PROFILE")
        self.key = config.access_key_id
        self.secret = config.secret_access_key
        self.token = config.session_token
        if self.key is None and config.profile is None:
            self.key = env.get("AWS_ACCESS_KEY_ID")
            self.secret = env.get("AWS_SECRET_ACCESS_KEY")
            self.token = env.get("AWS_SESSION_TOKEN")
        if self.key is not None and not self.secret:
            raise CredentialsError(f"an access key id ({self.key}) without a secret access key: "
                                   "set AWS_SECRET_ACCESS_KEY or S3Config(secret_access_key=...)")
        self.session: Any = None
        if (self.key is None or self.endpoint is None or self.region is None) and not self.anonymous:
            self.session = _session(self.profile)
            if self.session is not None:  # the profile fills in what is missing
                scoped = self.session._session.get_scoped_config() or {}
                self.endpoint = self.endpoint or scoped.get("endpoint_url")
                self.region = self.region or self.session.region_name
        self.region = self.region or "us-east-1"

    def credentials(self) -> Any:
        """The session's botocore credentials (profile, SSO, roles), for signing.

        Raises:
            CredentialsError: none were found anywhere.
        """
        found = None if self.session is None else self.session.get_credentials()
        if found is None:
            where = f"profile {self.profile!r}" if self.profile else "the environment or ~/.aws"
            raise CredentialsError(
                f"no AWS credentials found in {where}: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or pass S3Config(access_key_id=..., "
                "secret_access_key=...) (S3Config(anonymous=True) for a public bucket)")
        return found


def _session(profile: str | None) -> Any:
    """A boto3 session for ``profile`` (None: boto3 is not installed)."""
    try:
        import boto3
        import botocore.exceptions
    except ImportError:
        return None
    try:
        return boto3.session.Session(profile_name=profile)
    except botocore.exceptions.ProfileNotFound as exc:
        raise CredentialsError(f"AWS profile {profile!r} not found in ~/.aws/config or "
                               "~/.aws/credentials (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE)") from exc
