"""Object store dataset specs (``s3://``, ``gs://``, ``az://``, ``http(s)://``) to shard URLs: the process's shared clients, listings, and the
sizes and ETags they found (so building the shards costs no HEAD per shard, and finding
the dataset index object, ``turbofeed.index``, never a shard, costs no request).

Every object that looks like a tar shard is kept, compressed and zero-byte ones too:
the shards report those they cannot read (:class:`turbofeed.io.stores.shards.S3Shards`) instead of
leaving them out without a word.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import threading
import time
from collections.abc import Sequence

from ...errors import DatasetError
from ..local.index import TAR_SUFFIXES
from ..paths import INDEX_NAME, expand_braces
from ..retry import RemoteError
from .client import S3Client
from .config import ObjectInfo, S3Config, default_config
from .families import ENV_PREFIXES, split_url
from .transfers import run_parts
from .errors import not_found

# Shard suffixes, as for local paths: plain tars are read with ranged GETs; the compressed
# ones from a plain copy in the node cache (io.stores.compressed), .tar.zst is reported.
SHARD_SUFFIXES = TAR_SUFFIXES
COMPRESSED = tuple(suffix for suffix in SHARD_SUFFIXES if suffix != ".tar")

_CLIENTS: dict[tuple, S3Client] = {}
_CLIENTS_LOCK = threading.Lock()
# Sizes and ETags found while resolving a spec, handed to the S3Shards built right after
# it (taken once, so a later dataset looks again and sees a replaced object).
_KNOWN_TTL_S = 60.0
_KNOWN: dict[tuple[str, str], tuple[float, ObjectInfo]] = {}


def shared_client(config: S3Config | None = None) -> S3Client:
    """The process's one :class:`S3Client` for ``config`` (default: the configured default)
    and the current ``AWS_*``, ``GOOGLE_*``, ``AZURE_*`` and emulator variables."""
    config = config or default_config()
    key = (config, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIXES))))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = S3Client(config)
        return client


def close_clients() -> None:
    """Close the shared clients (tests, interpreter exit); later calls make new ones."""
    with _CLIENTS_LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
        _KNOWN.clear()
    for client in clients:
        client.close()


def _remember(client: S3Client, infos: list[ObjectInfo], listed: Sequence[ObjectInfo] = ()) -> None:
    """Keep the sizes and ETags of ``infos`` (and of the dataset index object, when the
    listing ``listed`` holds one) for :func:`stat` and :func:`listed_info`."""
    now = time.monotonic()
    for info in [*infos, *(o for o in listed if is_index(o.url))]:
        _KNOWN[(client.endpoint, info.url)] = (now, info)


def listed_info(url: str, client: S3Client) -> ObjectInfo | None:
    """Size and ETag of ``url`` as the listing that resolved the dataset a moment ago
    found it, or None: not in that listing (for the dataset index object: also when its
    folder was not listed whole, a few shards named one by one, so no request is spent
    on looking for it)."""
    hit = _KNOWN.pop((client.endpoint, url), None)
    if hit is not None and time.monotonic() - hit[0] < _KNOWN_TTL_S:
        return hit[1]
    return None


def stat(url: str, client: S3Client) -> ObjectInfo:
    """Size and ETag of ``url``: from the listing that resolved it a moment ago, else a HEAD."""
    return listed_info(url, client) or client.head(url)


def is_shard(url: str) -> bool:
    """A tar shard by its name, plain or compressed."""
    return url.endswith(SHARD_SUFFIXES)


def is_index(url: str) -> bool:
    """A dataset index object (:mod:`turbofeed.io.dsindex`), never a shard."""
    return url.rsplit("/", 1)[-1] == INDEX_NAME


def resolve_urls(text: str, config: S3Config | None = None) -> list[str]:
    """Expand an object store spec into shard URLs, checking that they exist.

    ``s3://b/train/shard-{000..099}.tar`` (braces), ``s3://b/train/*.tar`` (glob),
    ``s3://b/train/`` or ``s3://b/train`` (every tar shard below the prefix, sorted);
    the same for ``gs://`` and ``az://``; ``http(s)://`` takes shard URLs and brace
    patterns only (no listing: one HEAD per shard).
    One LIST per folder, not one request per shard. Compressed (``.tar.gz``, ``.tgz``,
    ...) and zero-byte shards are included: the dataset reads or reports them.

    Raises:
        DatasetError: objects are missing, a prefix holds no tar shard, a pattern matches
            an object that is no tar shard, no credentials were found, or the endpoint
            cannot be reached (fails within about a second: see
            :class:`~turbofeed.io.S3Config`).
    """
    out: list[str] = []
    exact: list[str] = []
    try:
        client = shared_client(config)
        for url in expand_braces(text):
            kind, root, key = split_url(url)
            if kind == "http" and not is_shard(key):
                raise DatasetError(f"{url}: an HTTP server cannot be listed or globbed: name the "
                                   "shards (a list, or a brace pattern such as shard-{000..099}.tar)")
            if glob.has_magic(key):
                head = key[:min(key.find(c) for c in "*?[" if c in key)]
                folder = f"{root}/{head[:head.rfind('/') + 1]}"  # as obstore lists anyway
                listed = client.list(folder)
                hits = [o for o in listed if fnmatch.fnmatchcase(o.url, url) and not is_index(o.url)]
                _remember(client, hits, listed)
                if not hits:
                    raise DatasetError(f"{url}: pattern matches no objects")
                out.extend(_check_tars(hits))
            elif is_shard(key):
                exact.append(url)
                out.append(url)
            else:
                folder = url if url.endswith("/") or not key else url + "/"
                listed = client.list(folder)
                hits = [o for o in listed if is_shard(o.url)]
                if not hits:
                    raise DatasetError(f"{folder}: no .tar objects under this prefix")
                _remember(client, hits, listed)
                out.extend(o.url for o in hits)
        _check_exist(exact, client)
    except RemoteError as exc:
        raise DatasetError(str(exc) if text in str(exc) else f"{text}: {exc}") from exc
    except ValueError as exc:  # a malformed URL (no bucket)
        raise DatasetError(str(exc)) from exc
    return out


def _check_tars(hits: list[ObjectInfo]) -> list[str]:
    for o in hits:
        if not is_shard(o.url):
            raise DatasetError(f"{o.url}: not a .tar shard")
    return [o.url for o in hits]


def _check_exist(urls: list[str], client: S3Client) -> None:
    """Find every URL with one LIST per folder (HEAD when a folder has few of them, or
    cannot be listed: HTTP, whose HEADs go ``max_concurrency`` at a time)."""
    folders: dict[str, list[str]] = {}
    for url in urls:
        folders.setdefault(url[:url.rfind("/") + 1], []).append(url)
    missing: list[str] = []
    for folder, members in folders.items():
        if len(members) > 4 and split_url(folder)[0] != "http":
            listed = {o.url: o for o in client.list(folder)}
            _remember(client, [listed[u] for u in members if u in listed], list(listed.values()))
            missing.extend(u for u in members if u not in listed)
        else:
            found: list[ObjectInfo | None] = [None] * len(members)

            def look(i: int) -> None:
                try:
                    found[i] = client.head(members[i])
                except RemoteError as exc:
                    if not not_found(exc):
                        raise
            run_parts(look, range(len(members)), client.config.max_concurrency)
            _remember(client, [info for info in found if info is not None])
            missing.extend(u for u, info in zip(members, found) if info is None)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise DatasetError(f"no such object: {shown}")
