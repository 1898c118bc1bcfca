"""PyTorch delivery: the DataLoader, device transfer, distributed environment."""

from .device import gpu_available
from .env import DistEnv, detect

__all__ = sorted(["DataLoader", "DistEnv", "detect", "gpu_available"])


def __getattr__(name: str):
    if name == "DataLoader":  # imports torch; only when asked
        from .loader import DataLoader

        return DataLoader
    raise AttributeError(name)
