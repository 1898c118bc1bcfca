"""GPUDirect-style storage client: S3 objects and local files to and from GPU memory.

``GPUDirectClient`` moves bytes (cuFile through KvikIO when GPUDirect Storage is
present, pinned staging buffers otherwise, plain host I/O without CUDA);
``GPUDirectDataset`` reads ``.npy``/``.pt``/``.safetensors`` tensors with it;
``turbofeed gds-status`` says which path this machine takes and why. See ``docs/gds.md``.
"""

import typing as _typing

from .buffers import StagingPool
from .client import GPUDirectClient
from .config import GDSConfig, LoadedConfig, load_config, parse_size
from .errors import BufferTooSmallError, GDSConfigError, GDSError
from .memory import DeviceBuffer, HostBuffer, as_buffer
from .status import format_status, probe

if _typing.TYPE_CHECKING:  # at run time: __getattr__ below, when first used
    from .dataset import GPUDirectDataset as GPUDirectDataset

__all__ = [
    "BufferTooSmallError", "DeviceBuffer", "GDSConfig", "GDSConfigError", "GDSError", "GPUDirectClient",
    "GPUDirectDataset", "HostBuffer", "LoadedConfig", "StagingPool", "as_buffer", "format_status",
    "load_config", "parse_size", "probe",
]


if not _typing.TYPE_CHECKING:  # type checkers see the import above
    def __getattr__(name: str):
        if name == "GPUDirectDataset":  # imports torch, so only when used
            from .dataset import GPUDirectDataset

            return GPUDirectDataset
        raise AttributeError(f"module 'turbofeed.gds' has no attribute {name!r}")
