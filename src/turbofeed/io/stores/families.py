"""Object stores beyond S3: ``gs://``, ``az://`` (``azure://``, ``abfs://``) and
``http(s)://`` URLs, their small configs, and the obstore store each one is read with.

Every scheme goes through the one :class:`~turbofeed.io.stores.client.S3Client` (its
concurrency slots, retries, counters and fault classification), and so through the same
node cache, streaming, dataset index and resume as ``s3://``: only the obstore store
under it differs (``S3Store``, ``GCSStore``, ``AzureStore`` or ``HTTPStore``), made here
from the store's config and its ecosystem's usual variables:

=========  ===============================================================================
``gs://``  Google application default credentials (``GOOGLE_APPLICATION_CREDENTIALS``,
           gcloud's ADC file, the metadata server); ``STORAGE_EMULATOR_HOST`` points at
           an emulator (unsigned requests, as Google's clients send it).
``az://``  ``AZURE_STORAGE_CONNECTION_STRING`` (``UseDevelopmentStorage=true`` for
           Azurite), else ``AZURE_STORAGE_ACCOUNT_NAME`` with ``AZURE_STORAGE_ACCOUNT_KEY``
           / ``AZURE_STORAGE_SAS_TOKEN`` / a service principal or managed identity
           (obstore reads those ``AZURE_*`` variables itself).
``http``   no listing (explicit URLs and brace patterns); ``HTTPConfig(headers=...)``
           carries tokens (``Authorization: Bearer ...``).
=========  ===============================================================================
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from ...base.registry import Registry
from ...redact import Redacted, mask, mask_key, redact_connection_string, redact_headers, redact_url, url_credentials

if TYPE_CHECKING:
    from obstore.store import ClientConfig



def is_remote(text: str) -> bool:
    """An object store URL (``s3://``, ``gs://``, ``az://``, ``azure://``, ``abfs://``,
    ``http(s)://``) rather than a local path."""
    return text.startswith(REMOTE_PREFIXES)


def family(url: str) -> str:
    """``"s3"``, ``"gcs"``, ``"azure"`` or ``"http"``.

    Raises:
        ValueError: not an object store URL.
    """
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in FAMILIES:
        raise ValueError(f"{url}: not an object store URL ({', '.join(REMOTE_PREFIXES)})")
    return FAMILIES[scheme]


def split_url(url: str) -> tuple[str, str, str]:
    """``(family, root, key)``: ``gs://b/x/y.tar`` -> ``("gcs", "gs://b", "x/y.tar")``;
    ``https://host:8/x/y.tar`` -> ``("http", "https://host:8", "x/y.tar")``. The root keeps
    the URL's own spelling (``azure://c`` and ``az://c`` name the same container).

    Raises:
        ValueError: not an object store URL, or no bucket / container / host in it.
    """
    kind = family(url)
    scheme, rest = url.split("://", 1)
    if kind == "http":
        parts = urlsplit(url)
        if not parts.netloc:
            raise ValueError(f"{url}: no host in the URL")
        refuse_credentials(url, "pass tokens as HTTPConfig(headers={'Authorization': ...})")
        return kind, f"{scheme}://{parts.netloc}", parts.path.lstrip("/")
    bucket, _, key = rest.partition("/")
    if "@" in bucket:
        refuse_credentials(f"{scheme}://{bucket}", f"pass credentials in the store's config ({STORES[kind].config})")
    if not bucket:
        raise ValueError(f"{url}: no {'container' if kind == 'azure' else 'bucket'} in the URL")
    return kind, f"{scheme}://{bucket}", key


_CARRIED = {"userinfo": "user and password", "query": "query string"}


def refuse_credentials(url: str, instead: str) -> None:
    """Refuse a URL that carries a user and password or a query string (either may hold a
    credential, which the URL would carry into every message, log line and cache key).
    The message shows the URL redacted (:func:`turbofeed.redact.redact_url`).

    Raises:
        ValueError: ``https://****@host/x.tar?****: a URL with a user and password and a
            query string is refused (...); <instead>``.
    """
    found = url_credentials(url)
    if found:
        carried = " and a ".join(_CARRIED[f] for f in found)
        raise ValueError(f"{redact_url(url)}: a URL with a {carried} is refused (they would be "
                         f"repeated in messages and logs); {instead}")


def check_endpoint(url: str | None, where: str) -> None:
    """Refuse an endpoint URL (from ``where``: a config field or a variable) that carries
    credentials: an endpoint names the service only.

    Raises:
        ValueError: see :func:`refuse_credentials`.
    """
    if url:
        refuse_credentials(url, f"{where} names the service only: pass credentials in their own settings")


@dataclass(frozen=True, repr=False)
class GCSConfig(Redacted):
    """How ``gs://`` buckets are reached (unset: Google's usual sources).

    Args:
        endpoint_url: the service, e.g. an emulator's ``http://127.0.0.1:9023`` (default:
            ``$STORAGE_EMULATOR_HOST``, else Google's).
        service_account_path: a service account JSON file (default: application default
            credentials: ``$GOOGLE_APPLICATION_CREDENTIALS``, gcloud's ADC, the metadata server).
        anonymous: unsigned requests (public buckets; always so for an emulator).
    """

    endpoint_url: str | None = None
    service_account_path: str | None = None
    anonymous: bool = False

    _HIDDEN: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"endpoint_url": redact_url}

    def __post_init__(self) -> None:
        check_endpoint(self.endpoint_url, "GCSConfig(endpoint_url=...)")


@dataclass(frozen=True, repr=False)
class AzureConfig(Redacted):
    """How ``az://`` (``azure://``, ``abfs://``) containers are reached (unset: the
    ``AZURE_*`` variables).

    Args:
        connection_string: as the Azure portal gives it (default
            ``$AZURE_STORAGE_CONNECTION_STRING``; ``UseDevelopmentStorage=true``: Azurite).
        account_name, account_key, sas_token: the storage account and a key or SAS token
            (default: ``AZURE_STORAGE_ACCOUNT_NAME``, ``AZURE_STORAGE_ACCOUNT_KEY``, ...;
            neither key nor token: a service principal or managed identity).
        endpoint_url: the blob service, e.g. ``http://127.0.0.1:10000/devstoreaccount1``.
        anonymous: unsigned requests (public containers).
    """

    connection_string: str | None = None
    account_name: str | None = None
    account_key: str | None = None
    sas_token: str | None = None
    endpoint_url: str | None = None
    anonymous: bool = False

    _HIDDEN: ClassVar[Mapping[str, Callable[[Any], Any]]] = {
        "connection_string": redact_connection_string, "account_key": mask_key, "sas_token": mask,
        "endpoint_url": redact_url}

    def __post_init__(self) -> None:
        check_endpoint(self.endpoint_url, "AzureConfig(endpoint_url=...)")


@dataclass(frozen=True, repr=False)
class HTTPConfig(Redacted):
    """How ``http(s)://`` shards are fetched.

    Args:
        headers: sent with every request, e.g. ``{"Authorization": "Bearer hf_..."}``
            (a dict, kept as sorted pairs so the config stays hashable). Its repr shows
            the values of known-harmless headers only (``User-Agent`` ...).
    """

    headers: Any = field(default=())

    _HIDDEN: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"headers": redact_headers}

    def __post_init__(self) -> None:
        pairs = self.headers.items() if isinstance(self.headers, dict) else self.headers
        object.__setattr__(self, "headers", tuple(sorted((str(k), str(v)) for k, v in pairs)))


def client_options(timeout: float, connect_timeout: float, concurrency: int,
                   endpoint: str | None) -> ClientConfig:
    """obstore's HTTP client options for one store (plain http only to an explicit endpoint)."""
    options: ClientConfig = {"timeout": timedelta(seconds=timeout),
                             "connect_timeout": timedelta(seconds=connect_timeout),
                             "pool_max_idle_per_host": str(concurrency)}
    if endpoint and endpoint.startswith("http://"):
        options["allow_http"] = True
    return options


def gcs_endpoint(config: GCSConfig | None) -> str | None:
    """The GCS service URL to use (None: Google's)."""
    host = (config.endpoint_url if config else None) or os.environ.get("STORAGE_EMULATOR_HOST")
    check_endpoint(host, "STORAGE_EMULATOR_HOST")
    if host and "://" not in host:
        host = "http://" + host  # Google's clients take "localhost:9023" as well
    return host.rstrip("/") if host else None


def make_gcs(bucket: str, config: GCSConfig | None, options: ClientConfig, endpoint: str | None):
    from obstore.store import GCSStore

    kwargs: dict = {}
    if endpoint:
        kwargs["base_url"] = endpoint
    if config is not None and config.service_account_path:
        kwargs["service_account"] = config.service_account_path
    elif endpoint or (config is not None and config.anonymous):
        # An emulator takes no credentials; skip_signature alone still asks the metadata
        # server for a token on writes, an "oauth disabled" account (object_store's
        # documented emulator setup) asks nothing.
        kwargs["service_account_key"] = json.dumps({"gcs_base_url": endpoint or "https://storage.googleapis.com",
                                                    "disable_oauth": True, "client_email": "", "private_key": "",
                                                    "private_key_id": ""})
    return GCSStore(bucket, client_options=options, retry_config={"max_retries": 0}, **kwargs)


def parse_connection_string(text: str) -> dict[str, str]:
    """``"AccountName=a;AccountKey=k;BlobEndpoint=..."`` -> ``{"AccountName": "a", ...}``."""
    out = {}
    for part in text.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            out[name] = value
    return out


def azure_settings(config: AzureConfig | None) -> dict[str, Any]:
    """AzureStore keyword arguments from the config and ``$AZURE_STORAGE_CONNECTION_STRING``
    (the other ``AZURE_*`` variables obstore reads itself)."""
    config = config or AzureConfig()
    kwargs: dict[str, Any] = {}
    conn = config.connection_string or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if conn:
        parts = parse_connection_string(conn)
        if parts.get("UseDevelopmentStorage", "").lower() == "true":
            kwargs["use_emulator"] = True
        for name, key in (("AccountName", "account_name"), ("AccountKey", "account_key"),
                          ("SharedAccessSignature", "sas_key"), ("BlobEndpoint", "endpoint")):
            if parts.get(name):
                kwargs[key] = parts[name]
    for value, key in ((config.account_name, "account_name"), (config.account_key, "account_key"),
                       (config.sas_token, "sas_key"), (config.endpoint_url, "endpoint")):
        if value:
            kwargs[key] = value
    if config.anonymous:
        kwargs["skip_signature"] = True
    check_endpoint(kwargs.get("endpoint"), "the connection string's BlobEndpoint")
    return kwargs


def make_azure(container: str, settings: dict[str, Any], options: ClientConfig):
    from obstore.store import AzureStore

    if settings.get("use_emulator") or str(settings.get("endpoint", "")).startswith("http://"):
        options = {**options, "allow_http": True}
    return AzureStore(container, client_options=options, retry_config={"max_retries": 0}, **settings)


def make_http(root: str, config: HTTPConfig | None, options: ClientConfig):
    from obstore.store import HTTPStore

    if config is not None and config.headers:
        options = {**options, "default_headers": dict(config.headers)}
    if root.startswith("http://"):
        options = {**options, "allow_http": True}
    return HTTPStore(root, client_options=options, retry_config={"max_retries": 0})


@dataclass(frozen=True)
class Store:
    """One store family: the URLs it reads and how its obstore store is made.

    Attributes:
        name: the family (``"s3"``, ``"gcs"``, ``"azure"``, ``"http"``).
        schemes: the URL schemes it reads (``gs`` for ``gs://``).
        config: the name of its config class (a field of ``S3Config`` holds it).
        env: the prefixes of the variables that decide how it is reached (part of the
            shared client's key).
        where: where its endpoint is set, for the message when it cannot be reached.
        make: ``make(client, root, connect_timeout)``: the obstore store of one bucket,
            container or host (``client``: the :class:`~turbofeed.io.stores.client.S3Client`).
        endpoint: ``endpoint(client, root)``: the service its requests go to, for messages.
    """

    name: str
    schemes: tuple[str, ...]
    config: str
    env: tuple[str, ...]
    where: str
    make: Callable[[Any, str, float], Any]
    endpoint: Callable[[Any, str], str]


def _options(client: Any, connect: float, endpoint: str | None) -> ClientConfig:
    c = client.config
    return client_options(c.timeout, connect, c.max_concurrency, endpoint)


def _name(root: str) -> str:
    return root.split("://", 1)[1]


def _azure_endpoint(client: Any, root: str) -> str:
    settings = azure_settings(client.config.azure)
    return settings.get("endpoint") or ("Azurite" if settings.get("use_emulator") else
                                        f"the account {settings.get('account_name', '$AZURE_STORAGE_ACCOUNT_NAME')}")


#: The object stores, by family: every URL scheme turbofeed reads and what reads it.
STORES: Registry[Store] = Registry("store", (
    Store("s3", ("s3",), "S3Config", ("AWS_",), "AWS_ENDPOINT_URL or S3Config(endpoint_url=...)",
          lambda c, root, connect: c.make_s3(_name(root)), lambda c, root: c.endpoint),
    Store("gcs", ("gs",), "GCSConfig", ("GOOGLE_", "STORAGE_EMULATOR_HOST"),
          "STORAGE_EMULATOR_HOST or GCSConfig(endpoint_url=...)",
          lambda c, root, connect: make_gcs(_name(root), c.config.gcs, _options(c, connect, gcs_endpoint(c.config.gcs)),
                                            gcs_endpoint(c.config.gcs)),
          lambda c, root: gcs_endpoint(c.config.gcs) or "https://storage.googleapis.com"),
    Store("azure", ("az", "azure", "abfs", "abfss"), "AzureConfig", ("AZURE_", "AZURITE_"),
          "AZURE_STORAGE_CONNECTION_STRING or AzureConfig(...)",
          lambda c, root, connect: make_azure(_name(root), azure_settings(c.config.azure), _options(c, connect, None)),
          _azure_endpoint),
    Store("http", ("http", "https"), "HTTPConfig", (), "the URL",
          lambda c, root, connect: make_http(root, c.config.http, _options(c, connect, None)), lambda c, root: root),
))
#: URL scheme -> store family.
FAMILIES = {scheme: store.name for store in STORES.values() for scheme in store.schemes}
REMOTE_PREFIXES = tuple(f"{scheme}://" for scheme in FAMILIES)
#: The variables whose values decide how a store is reached (part of the shared client's key).
ENV_PREFIXES = tuple(prefix for store in STORES.values() for prefix in store.env)

__all__ = ["AzureConfig", "GCSConfig", "HTTPConfig", "STORES", "Store", "is_remote", "split_url"]
