"""Keywords that were renamed, accepted under their old name for one release.

:data:`RENAMED` is the one list. A public function or constructor that takes a new name
is wrapped with :func:`accepts_renamed`; a call with the old name then does what the new
one does, with one ``DeprecationWarning`` per call pointing at the caller's line and
naming the keyword to write instead. A call with both names raises ``TypeError``, as a
keyword given twice does. The signature (``inspect.signature``, ``help()``, type
checkers) shows only the new name. (DataLoader and Pipeline take no ``storage=``: on
them ``s3=`` is one of the old data keywords, ``turbofeed.datasets.OLD_LOADER_KEYWORDS``.)

=======  ===========  ===============================================================
old      new          why
=======  ===========  ===============================================================
``s3``   ``storage``  its :class:`~turbofeed.io.S3Config` configures every object
                      store (``s3://``, ``gs://``, ``az://``, ``https://``), not S3
                      alone (issue 38)
=======  ===========  ===============================================================
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

#: Old keyword -> new keyword, each accepted under its old name for one release.
RENAMED: dict[str, str] = {"s3": "storage"}

P = ParamSpec("P")
R = TypeVar("R")


def caller_name(fn: Callable[..., Any]) -> str:
    """How a user calls ``fn``: ``DataLoader`` for ``DataLoader.__init__``."""
    name = fn.__qualname__
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def accepts_renamed(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, also taking the old name of each of its keywords :data:`RENAMED` lists.

    Raises (from the wrapped call):
        TypeError: the old and the new name given together.
    """
    params = inspect.signature(fn).parameters
    renamed = {old: new for old, new in RENAMED.items() if new in params and old not in params}
    assert renamed, f"{fn.__qualname__} takes no renamed keyword"
    name = caller_name(fn)

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        for old, new in renamed.items():
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{name}() got both {old}= and {new}=: {old} is the old name of {new}; "
                                    f"pass {new}= alone")
                warnings.warn(f"{name}(): {old}= is now {new}=; pass {new}=... (the old name goes in the next "
                              "release)", DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
        return fn(*args, **kwargs)

    return wrapper
