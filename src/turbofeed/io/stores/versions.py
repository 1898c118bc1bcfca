"""What tells one version of an object from another, from what its server gives.

Everything keyed by an object (the node cache's copies, per-shard and dataset indexes) is
keyed by :attr:`ObjectInfo.version`, and every read checks that it still reads that one:

================================  ==========================================================
the server sends                  version, and how each ranged GET is checked
================================  ==========================================================
a strong ETag (S3, GCS, Azure,    the ETag (without quotes); ``If-Match`` on every GET, so a
most web servers)                 replaced object fails the GET (412)
a weak ETag (``W/"..."``:         ``Last-Modified`` and size; no ``If-Match`` (it compares
Express, serve-static, CDNs) or   strongly, so a weak tag never matches: every GET would fail),
none (nginx ``etag off``), and a  each response's ``Last-Modified`` and total size compared
``Last-Modified``                 with the indexed ones
neither                           a token of the HEAD that found it: nothing keyed by it is
                                  believed by another loader or process (one warning, from
                                  :class:`~turbofeed.io.stores.shards.S3Shards`); each response's
                                  total size is still checked
================================  ==========================================================

``Last-Modified`` has one-second steps: a shard replaced by one of the same size within
the same second as the indexed one is not told apart (a server with a strong ETag is).
"""

from __future__ import annotations

import datetime
import itertools
import logging
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from ...errors import TurbofeedError

log = logging.getLogger("turbofeed")

# Lookup ids: this process's random prefix, its pid (a forked child keeps the prefix and
# the count) and a count; cheaper than a uuid4 per object of a listing of millions.
_PREFIX = uuid.uuid4().hex[:16]
_COUNT = itertools.count()


def _new_lookup_id() -> str:
    return f"{_PREFIX}-{os.getpid()}-{next(_COUNT)}"


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class ObjectChanged(TurbofeedError):
    """A read found another version of the object than the one indexed (its size or
    ``Last-Modified`` differ, where no ``If-Match`` could say so). Final, never retried."""


@dataclass(frozen=True)
class ObjectInfo:
    """One object: its URL, size, and what tells its versions apart.

    Attributes:
        etag: its strong ETag without quotes (sent as ``If-Match``); ``""`` when the
            server sends a weak one or none.
        modified: its ``Last-Modified`` (ISO 8601) where there is no strong ETag, else ``""``.
        lookup_id: unique to the request that found the object, for :attr:`version` when
            neither of the above is there.
    """

    url: str
    size: int
    etag: str
    modified: str = ""
    lookup_id: str = field(default_factory=_new_lookup_id, compare=False, repr=False)

    @property
    def versioned(self) -> bool:
        """Whether the server gave something that tells versions of one size apart."""
        return bool(self.etag or self.modified)

    @property
    def version(self) -> str:
        """The key of this version: the ETag (so ``s3://`` keys are the ETag alone), else
        ``modified <time>``, else ``unversioned <lookup_id>`` (never found again)."""
        if self.etag:
            return self.etag
        if self.modified:
            return f"modified {self.modified}"
        return f"unversioned {self.lookup_id}"

    def describe(self) -> str:
        """The version for a message: ``ETag abc``, ``Last-Modified ...`` or ``no ETag or Last-Modified``."""
        if self.etag:
            return f"ETag {self.etag}"
        return f"Last-Modified {self.modified}" if self.modified else "no ETag or Last-Modified"


def etag_of(value: str | None) -> str:
    """A strong ETag without its quotes, as :class:`ObjectInfo` holds it; ``""`` for none
    or a weak one."""
    value = (value or "").strip()
    return "" if value.startswith("W/") else value.strip('"')


def modified_of(value: datetime.datetime | None) -> str:
    """A ``Last-Modified`` as :class:`ObjectInfo` holds it (``""``: none; obstore gives
    the epoch for a response without one)."""
    return "" if value is None or value == _EPOCH else value.isoformat()


def info_of(url: str, size: int, e_tag: str | None, last_modified: datetime.datetime | None) -> ObjectInfo:
    """The :class:`ObjectInfo` of a HEAD or listing (``Last-Modified`` kept only where
    there is no strong ETag, so the version of an ``s3://`` object stays its ETag)."""
    etag = etag_of(e_tag)
    return ObjectInfo(url, size, etag, "" if etag else modified_of(last_modified))


def check_same(expect: ObjectInfo, size: int, last_modified: datetime.datetime | None) -> None:
    """Raise :class:`ObjectChanged` when a response's total ``size`` or ``Last-Modified``
    is not the version ``expect`` describes (a response without one is not judged by it)."""
    if size != expect.size:
        raise ObjectChanged(f"{expect.url}: {size} bytes now, {expect.size} when it was indexed")
    now = modified_of(last_modified)
    if expect.modified and now and now != expect.modified:
        raise ObjectChanged(f"{expect.url}: Last-Modified {now} now, {expect.modified} when it was indexed")


def warn_unversioned(infos: Iterable[ObjectInfo]) -> None:
    """One warning naming the objects whose server gives nothing that tells their
    versions apart, and what that costs (none when there are none)."""
    urls = [info.url for info in infos if not info.versioned]
    if urls:
        more = f" and {len(urls) - 1} more" if len(urls) > 1 else ""
        log.warning("turbofeed: %s%s: the server sends no strong ETag and no Last-Modified, so nothing tells a "
                    "replaced shard from the one indexed: their indexes and node-cache copies are this loader's "
                    "alone (indexed again by every new loader and process)", urls[0], more)


__all__ = ["ObjectChanged", "ObjectInfo", "check_same", "etag_of", "info_of", "modified_of", "warn_unversioned"]
