"""PyTorch delivery: the DataLoader, device transfer, distributed environment (the
detection itself is :mod:`turbofeed.base.ranks`, which imports no torch)."""

import typing as _typing

from .device import gpu_available
from ..base.ranks import DistEnv, detect

if _typing.TYPE_CHECKING:  # at run time: __getattr__ below, when first asked
    from .loader import DataLoader as DataLoader

__all__ = ["DataLoader", "DistEnv", "detect", "gpu_available"]


if not _typing.TYPE_CHECKING:  # type checkers see the import above
    def __getattr__(name: str):
        if name == "DataLoader":  # imports torch; only when asked
            from .loader import DataLoader

            return DataLoader
        raise AttributeError(name)
