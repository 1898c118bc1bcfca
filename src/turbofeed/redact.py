"""How credentials are kept out of text: reprs, error messages and log lines.

turbofeed holds its users' cloud credentials (S3 keys and session tokens, Azure account
keys, SAS tokens and connection strings, bearer tokens in HTTP headers). None of them is
ever printed; identifiers stay visible (access key ids, account names, endpoints):

=========================  =============================================================
value                      shown as
=========================  =============================================================
a token                    ``'****'`` (:func:`mask`)
a key                      ``'****WXYZ'``: its last 4 characters (:func:`mask_key`),
                           as the AWS CLI shows a secret key
a URL                      without its userinfo and query string, saying they were
                           there: ``https://****@host/d/x.tar?****`` (:func:`redact_url`)
text holding URLs          each URL as above (:func:`redact_text`): error texts of the
                           storage libraries, before they go into turbofeed's messages
an Azure connection        its harmless parts (``AccountName``, ``BlobEndpoint`` ...);
string                     ``AccountKey`` as a key, any other part as a token
                           (:func:`redact_connection_string`)
HTTP headers               values of known-harmless headers (``User-Agent`` ...) only
                           (:func:`redact_headers`)
boto3's DEBUG log lines    the secrets turbofeed gave boto3, and any
                           ``X-Amz-Security-Token`` value, as ``****``
                           (:func:`hide_in_library_logs`): botocore logs request headers
                           and the string it signs, session token included
=========================  =============================================================

The config classes take their ``repr``/``str``/``__rich_repr__`` from :class:`Redacted`;
equality, hashing and pickling keep using the real values (a pickled config carries
its credentials: it must, to rebuild its clients).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import fields
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

#: What a hidden value, or the hidden part of one, is replaced by.
MASK = "****"

#: Headers whose values are shown (lower case); any other header's value is hidden.
HARMLESS_HEADERS = frozenset({"accept", "accept-encoding", "accept-language", "cache-control",
                              "connection", "pragma", "user-agent"})

#: Connection string parts shown as they are; ``AccountKey`` is a key, any other part a token.
_CONNECTION_VISIBLE = frozenset({"DefaultEndpointsProtocol", "AccountName", "BlobEndpoint",
                                 "QueueEndpoint", "TableEndpoint", "FileEndpoint", "EndpointSuffix",
                                 "UseDevelopmentStorage", "DevelopmentStorageProxyUri"})

# A URL inside free text: a scheme, "://", then everything up to a space, a quote or an
# angle bracket (a comma or bracket right after a URL falls into its query, hidden with it).
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def mask(value: str | None, keep: int = 0) -> str | None:
    """A secret as it may be shown: ``'****'``, or ``'****'`` and its last ``keep``
    characters (only when it is at least three times as long, so most of it stays
    hidden). None stays None (nothing set), the empty string stays empty."""
    if not value:
        return value
    tail = value[-keep:] if keep and len(value) >= 3 * keep else ""
    return MASK + tail


def mask_key(value: str | None) -> str | None:
    """A key as it may be shown: ``'****'`` and its last 4 characters (``mask(value, keep=4)``)."""
    return mask(value, keep=4)


def url_credentials(url: str) -> list[str]:
    """What in ``url`` may carry a credential: ``["userinfo"]``, ``["query"]``, both, or
    ``[]`` (``https://user:pass@host/x?sig=...`` -> ``["userinfo", "query"]``)."""
    parts = urlsplit(url)
    found = []
    if "@" in parts.netloc:
        found.append("userinfo")
    if parts.query:
        found.append("query")
    return found


def redact_url(url: str) -> str:
    """``url`` without its userinfo, query string and fragment, each replaced by ``****``
    so the reader sees that one was there:

    ``https://user:pass@host:8/d/x.tar?sig=abc`` -> ``https://****@host:8/d/x.tar?****``.

    A URL with none of them is returned as it is (``s3://bucket/key``). Text that does not
    parse as a URL is returned unchanged when it holds no ``@``, ``?`` or ``#``, else as
    ``****``.
    """
    if "@" not in url and "?" not in url and "#" not in url:
        return url
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        netloc = f"{MASK}@{host}" if "@" in parts.netloc else host
        out = urlunsplit((parts.scheme, netloc, parts.path, MASK if parts.query else "",
                          MASK if parts.fragment else ""))
    except ValueError:
        return MASK
    if url.endswith("?") and not parts.query:  # an empty query: nothing hidden, keep its "?"
        out += "?"
    return out


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted by :func:`redact_url` (an error text of a
    storage library, before turbofeed puts it in a message or a log line)."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


def redact_connection_string(text: str | None) -> str | None:
    """An Azure connection string as it may be shown: ``AccountName=a;AccountKey=****WXYZ;
    BlobEndpoint=http://host/a``. Parts other than the known harmless ones are ``****``;
    endpoints go through :func:`redact_url`."""
    if not text:
        return text
    shown = []
    for part in text.split(";"):
        name, sep, value = part.strip().partition("=")
        if not sep:
            shown.append(MASK if name else "")
        elif name == "AccountKey":
            shown.append(f"{name}={mask(value, keep=4)}")
        elif name in _CONNECTION_VISIBLE:
            shown.append(f"{name}={redact_url(value)}")
        else:
            shown.append(f"{name}={mask(value)}")
    return ";".join(shown)


def redact_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``(name, value)`` pairs with every value hidden but those of :data:`HARMLESS_HEADERS`
    (``Authorization``, ``X-Api-Key`` and any header not known to be harmless: ``****``)."""
    return tuple((name, value if name.lower() in HARMLESS_HEADERS else MASK) for name, value in headers)


def shown_fields(obj: Any, hidden: Mapping[str, Callable[[Any], Any]]) -> Iterator[tuple[str, Any]]:
    """``(name, value)`` of each field of the dataclass ``obj``, in order, as its repr may
    show them: a field named in ``hidden`` is shown as ``hidden[name](value)`` (for
    instance :func:`mask`), every other field as it is. Fields left unset (None) stay None."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name in hidden and value is not None:
            value = hidden[f.name](value)
        yield f.name, value


def shown_repr(obj: Any, hidden: Mapping[str, Callable[[Any], Any]]) -> str:
    """``Name(field=value, ...)`` of the dataclass ``obj`` with :func:`shown_fields`'s values
    (what its ``__repr__`` returns)."""
    body = ", ".join(f"{name}={value!r}" for name, value in shown_fields(obj, hidden))
    return f"{type(obj).__name__}({body})"



#: The loggers of libraries turbofeed hands credentials to that log request headers.
LIBRARY_LOGGERS = ("botocore.auth", "botocore.endpoint", "botocore.awsrequest", "botocore.credentials",
                   "botocore.parsers", "botocore.hooks")
# A session token header as botocore logs it: in the string to sign (``x-amz-security-token:V``)
# and in the request's headers (``'X-Amz-Security-Token': b'V'``).
_TOKEN_HEADER = re.compile(r"(?i)(x-amz-security-token['\"]?\s*[:=]\s*b?['\"]?)[^'\"\s,}]+")


class _LibraryLogFilter(logging.Filter):
    """Rewrites a record whose message holds a hidden value or a session token header."""

    def __init__(self) -> None:
        super().__init__()
        self._values: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def hide(self, values: Iterable[str | None]) -> None:
        with self._lock:
            self._values = self._values | {v for v in values if v and len(v) >= 8}  # not 'test'

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot format is logging's problem, not ours
            return True
        shown = _TOKEN_HEADER.sub(lambda m: m.group(1) + MASK, text)
        for value in self._values:
            shown = shown.replace(value, MASK)
        if shown != text:
            record.msg, record.args = shown, None
        return True


_LOG_FILTER = _LibraryLogFilter()


def hide_in_library_logs(*values: str | None) -> None:
    """Keep ``values`` (secrets handed to boto3) and every session token header out of
    the records of :data:`LIBRARY_LOGGERS`, which log request headers at DEBUG level.
    Idempotent; the filter is attached to those loggers once and stays."""
    _LOG_FILTER.hide(values)
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if _LOG_FILTER not in logger.filters:
            logger.addFilter(_LOG_FILTER)


class Redacted:
    """A mixin giving a config dataclass with credentials its ``repr``/``str``/``__rich_repr__``:
    the fields named in ``_HIDDEN`` (name -> how its value is shown: :func:`mask`,
    :func:`mask_key`, :func:`redact_url` ...) are redacted, the others shown as they are.
    Declare the dataclass with ``repr=False`` so this repr is kept. Equality, hashing and
    pickling stay the dataclass's own, on the real values.

    Example::

        @dataclass(frozen=True, repr=False)
        class TokenConfig(Redacted):
            user: str
            token: str
            _HIDDEN: ClassVar[dict[str, Callable[[Any], Any]]] = {"token": mask}

        repr(TokenConfig("me", "s3cr3t"))  # "TokenConfig(user='me', token='****')"
    """

    _HIDDEN: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}

    def __repr__(self) -> str:
        return shown_repr(self, self._HIDDEN)

    def __rich_repr__(self) -> Iterator[tuple[str, Any]]:
        yield from shown_fields(self, self._HIDDEN)


__all__ = ["HARMLESS_HEADERS", "LIBRARY_LOGGERS", "MASK", "Redacted", "hide_in_library_logs", "mask", "mask_key", "redact_connection_string", "redact_headers", "redact_text",
           "redact_url", "shown_fields", "shown_repr", "url_credentials"]
