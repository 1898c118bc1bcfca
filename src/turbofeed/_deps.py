"""Two core dependencies, imported on first use so that ``import turbofeed`` works where one
is missing (a machine with its own fixed environment, e.g. a GPU box without internet).

- ``simplejpeg`` (libjpeg-turbo for the CPU path): a stand-in module that imports the real
  one at the first attribute read, then holds its attributes (no cost after that); where it
  is missing that read raises ImportError naming the pip command, so only a JPEG decode on
  the CPU fails, and says why.
- ``tqdm``: progress bars are cosmetic; without the package they are silently left out.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from typing import Any

SIMPLEJPEG_FIX = "pip install 'simplejpeg>=1.7'"


class _OnFirstUse:
    """A module imported at its first attribute read; its attributes are then copied here,
    so later reads are plain instance lookups (``__getattr__`` runs only for missing names)."""

    def __init__(self, name: str, why: str) -> None:
        self._name, self._why = name, why

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        try:
            module = importlib.import_module(self._name)
        except ImportError as exc:
            raise ImportError(f"{self._why}: {exc}") from exc
        self.__dict__.update(vars(module))
        return getattr(module, attr)


simplejpeg: Any = _OnFirstUse(
    "simplejpeg", f"turbofeed decodes JPEGs on the CPU with simplejpeg (a core dependency), which is not "
                  f"installed: {SIMPLEJPEG_FIX}")


class _NoBar:
    """What tqdm's bar does, minus the bar: iterate, update, close."""

    def __init__(self, iterable: Iterable[Any] | None = None, *args: Any, **kwargs: Any) -> None:
        self._iterable = iterable if iterable is not None else ()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._iterable)

    def update(self, n: float = 1) -> None:
        pass

    def close(self) -> None:
        pass


def tqdm(*args: Any, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm(*args, **kwargs)``, or a bar that shows nothing without tqdm."""
    try:
        from tqdm.auto import tqdm as bar
    except ImportError:
        return _NoBar(*args, **kwargs)
    return bar(*args, **kwargs)
