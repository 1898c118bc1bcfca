"""turbofeed: tar shards and image folders to PyTorch batches, fast, and never hanging.

Public names only. ``turbofeed.DataLoader`` (batches as torch tensors) and
``turbofeed.MultiGpuTransfer`` need PyTorch (``pip install 'turbofeed[torch]'``), which is
imported when they are first used, not by ``import turbofeed``; ``turbofeed.Pipeline``
(samples as NumPy arrays) does not need it.
"""

import typing as _typing
from importlib import import_module as _import_module
from importlib.util import find_spec as _find_spec

from . import transforms
from .datasets import Dataset, mix
from .errors import (DatasetError, ImageTooLarge, MissingExtra, SampleError, StorageError, TurbofeedError,
                     UserCodeError)
from .io import AzureConfig, GCSConfig, HTTPConfig, S3Config
from .pipeline import DistributedPipeline, Pipeline, Sample, Stats
from .torch.device import gpu_available

if _typing.TYPE_CHECKING:  # at run time they come from __getattr__ below, on first use (they import torch)
    from .torch.loader import DataLoader as DataLoader  # "X as X": exported whatever __all__ says
    from .torch.multi_gpu import MultiGpuTransfer as MultiGpuTransfer

__version__ = "0.1.0"

# Imported on first use (they import torch): name -> module.
_NEED_TORCH = {"DataLoader": ".torch.loader", "MultiGpuTransfer": ".torch.multi_gpu"}

__all__ = [
    "AzureConfig", "DataLoader", "Dataset", "DatasetError", "DistributedPipeline", "GCSConfig", "HTTPConfig",
    "ImageTooLarge", "MissingExtra", "MultiGpuTransfer", "Pipeline", "S3Config", "Sample", "SampleError", "Stats", "StorageError", "TurbofeedError",
    "UserCodeError", "gpu_available", "mix", "transforms",
]
if _find_spec("torch") is None:  # not installed: `from turbofeed import *` still works
    __all__.remove("DataLoader")
    __all__.remove("MultiGpuTransfer")


if not _typing.TYPE_CHECKING:  # type checkers see the imports above (a misspelt name stays an error)
    def __getattr__(name: str):
        if name not in _NEED_TORCH:
            raise AttributeError(f"module 'turbofeed' has no attribute {name!r}")
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise MissingExtra(f"turbofeed.{name} needs PyTorch, which cannot be imported here ({exc}): "
                               f"pip install 'turbofeed[torch]'") from exc
        value = getattr(_import_module(_NEED_TORCH[name], __name__), name)
        globals()[name] = value  # found directly from now on
        return value


def __dir__() -> list[str]:
    """The module's names, with the torch ones (``help(turbofeed)`` documents what it
    lists; it imports torch then, as any use of them does)."""
    return sorted(set(globals()) | set(__all__))
