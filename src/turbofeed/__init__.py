"""turbofeed: tar shards and image folders to PyTorch batches, fast, and never hanging.

Public names only; see ``turbofeed.DataLoader`` and ``turbofeed.Pipeline``.
"""

from . import transforms
from .errors import DatasetError, ImageTooLarge, SampleError, TurbofeedError
from .io.s3config import S3Config
from .pipeline import DistributedPipeline, Pipeline, Sample, Stats
from .torch.device import gpu_available

__version__ = "0.1.0"

__all__ = sorted([
    "DataLoader", "DatasetError", "DistributedPipeline", "ImageTooLarge", "MultiGpuTransfer", "Pipeline",
    "S3Config", "Sample", "SampleError", "Stats", "TurbofeedError",
    "gpu_available", "transforms",
])


def __getattr__(name: str):
    if name == "DataLoader":  # imports torch, so only when used
        from .torch.loader import DataLoader

        return DataLoader
    if name == "MultiGpuTransfer":
        from .torch.multi_gpu import MultiGpuTransfer

        return MultiGpuTransfer
    raise AttributeError(f"module 'turbofeed' has no attribute {name!r}")
