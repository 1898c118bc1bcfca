"""What an S3 failure means: the error types turbofeed raises, and the classification
of obstore's and botocore's errors into retryable or final, missing or replaced.

Both libraries are optional and raise their own types, so errors are recognised by
type name, botocore's ``response`` dict, or the HTTP status in obstore's message text.
"""

from __future__ import annotations

import re
import socket

from ...errors import MissingExtra, TurbofeedError
from .config import CredentialsError
from .versions import ObjectChanged

_FINAL_STATUS = {400, 401, 403, 404, 405, 409, 411, 412, 416}
_FINAL_NAMES = {  # obstore and botocore error types that waiting cannot fix
    "NotFoundError", "PermissionDeniedError", "UnauthenticatedError", "InvalidPathError",
    "NotSupportedError", "AlreadyExistsError", "PreconditionError", "NotModifiedError",
    "UnknownConfigurationKeyError", "NoCredentialsError", "PartialCredentialsError",
    "ParamValidationError", "NoSuchKey", "NoSuchBucket", "NoSuchUpload", "ProfileNotFound"}
_THROTTLE_CODES = ("SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                   "RequestTimeTooSkewed", "InternalError", "ServiceUnavailable",
                   "RequestLimitExceeded", "TooManyRequests")
_CONNECT_TEXT = ("tcp connect error", "dns error", "connection refused", "(connect)",
                 "failed to lookup address", "could not connect to the endpoint")
_STATUS = re.compile(r"status(?: code)?:?\s*(\d{3})\b", re.IGNORECASE)


class S3Unavailable(MissingExtra):
    """No S3 client library is installed (``pip install 'turbofeed[s3]'``); an ImportError."""


class ShortRead(OSError):
    """The server sent fewer bytes than the range asked for (a dropped connection)."""


class Unreachable(TurbofeedError):
    """The endpoint never answered: refused, unknown host or connect timeout. Final."""


class LocalWriteError(TurbofeedError):
    """Bytes arrived but could not be stored locally (disk full). Final."""


def retryable(exc: BaseException) -> bool:
    """5xx, throttling, timeouts, dropped connections and short bodies: yes; 4xx,
    missing objects, credentials and local failures: no."""
    if isinstance(exc, (Unreachable, LocalWriteError, CredentialsError, ObjectChanged, FileNotFoundError,
                        PermissionError, ValueError, TypeError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError, ShortRead)):
        return True
    if type(exc).__name__ in _FINAL_NAMES:
        return False
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        code = str(response.get("Error", {}).get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return code in _THROTTLE_CODES or status >= 500 or status in (408, 429)
    found = _STATUS.search(str(exc))  # obstore's GenericError carries the status in its text
    return found is None or int(found.group(1)) not in _FINAL_STATUS


def cannot_connect(exc: BaseException) -> bool:
    """The request never reached a server (as opposed to a server failing it)."""
    if isinstance(exc, (ConnectionRefusedError, socket.gaierror)):
        return True
    if type(exc).__name__ in ("EndpointConnectionError", "ConnectTimeoutError"):
        return True
    text = str(exc).lower()
    return any(s in text for s in _CONNECT_TEXT)


def not_found(exc: BaseException | None) -> bool:
    """``exc`` (or the error it was raised from) says the object does not exist."""
    while exc is not None:
        if isinstance(exc, FileNotFoundError) or type(exc).__name__ in ("NotFoundError", "NoSuchKey"):
            return True
        response = getattr(exc, "response", None)  # botocore
        if isinstance(response, dict) and str(response.get("Error", {}).get("Code")) in ("404", "NoSuchKey"):
            return True
        exc = exc.__cause__
    return False


def changed(exc: BaseException | None) -> bool:
    """``exc`` (or its cause) is a failed ``If-Match``, or a response of another
    ``Last-Modified`` or size (:class:`ObjectChanged`): the object was replaced."""
    while exc is not None:
        if isinstance(exc, ObjectChanged) or type(exc).__name__ == "PreconditionError":
            return True
        response = getattr(exc, "response", None)
        if isinstance(response, dict) and str(response.get("Error", {}).get("Code")) in (
                "412", "PreconditionFailed"):
            return True
        exc = exc.__cause__
    return False
