"""User code in a pass: what an exception from a user callable, or a value it returns that
cannot be batched, becomes.

The callables are a ``transform``'s own functions (after turbofeed's fused ops), ``map``,
``collate`` and ``batch_transform``. Their failures are bugs, not bad data: by default
(``user_errors="raise"``) the first one stops the pass as a
:class:`~turbofeed.errors.UserCodeError` naming the callable, shard and key, raised from
the callable's own exception; the bad-sample policy never sees it, so a function that
fails on every sample is one error at the first batch, not a million "replaced" lines.
``user_errors="bad_sample"`` opts the per-sample callables (transform callables, ``map``)
back into ``on_error``; a batch-level one (``collate``, ``batch_transform``) always raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import UserCodeError

if TYPE_CHECKING:
    from .work import SampleWork

USER_ERRORS = ("raise", "bad_sample")


def check_user_errors(user_errors: str) -> str:
    """``user_errors`` checked.

    Raises:
        ValueError: neither ``"raise"`` nor ``"bad_sample"``.
    """
    if user_errors not in USER_ERRORS:
        raise ValueError(f"user_errors must be 'raise' or 'bad_sample', got {user_errors!r}")
    return user_errors


def name_of(role: str, fn: Callable[..., Any]) -> str:
    """``role=name`` for messages: ``map=tokenize``, ``transform[2]=ColorJitter``.

    A function gives its qualified name; an object (a torchvision transform) its type's."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{role}={name}"


def raised(name: str, exc: BaseException, shard: str = "", key: str = "") -> UserCodeError:
    """The error for callable ``name`` raising ``exc`` (raise it ``from exc``)."""
    return UserCodeError(name, shard, key, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


def returned(name: str, value: Any, wanted: str, shard: str = "", key: str = "") -> UserCodeError:
    """The error for callable ``name`` returning ``value`` where ``wanted`` was needed."""
    return UserCodeError(name, shard, key, f"returned {type(value).__name__}, not {wanted}")


def routed(error: UserCodeError, user_errors: str, work: SampleWork, gid: int) -> Exception:
    """What to raise for ``error`` on sample ``gid``: the error itself, or under
    ``user_errors="bad_sample"`` a bad sample of stage ``augment`` saying the same."""
    if user_errors == "bad_sample":
        return work.error(gid, "augment", ValueError(f"{error.callable_name}: {error.reason}"))
    return error


def call_on_batch(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` for a batch-level callable (``collate``, ``batch_transform``): what it
    raises, or a None it returns, becomes the :class:`UserCodeError` that stops the pass."""
    try:
        out = fn(*args)
    except Exception as exc:
        raise raised(name, exc) from exc
    if out is None:
        raise returned(name, out, "a batch")
    return out
