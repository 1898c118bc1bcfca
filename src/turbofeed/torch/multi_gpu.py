"""Copies between GPUs: peer-to-peer where the devices allow it, staged through pinned
host memory otherwise."""

from __future__ import annotations

from typing import Any

import torch


class MultiGpuTransfer:
    """Helpers for moving tensors between GPUs of one node.

    Example::

        if MultiGpuTransfer.can_access_peer(0, 1):
            ...
        y = MultiGpuTransfer.gpu_to_gpu(x, "cuda:1")   # P2P or staged, asynchronous
    """

    @staticmethod
    def can_access_peer(src: int, dst: int) -> bool:
        """True when GPU ``src`` can read/write GPU ``dst`` directly (NVLink or PCIe P2P).
        False without CUDA or for an invalid device index; never raises."""
        if not torch.cuda.is_available():
            return False
        count = torch.cuda.device_count()
        if not (0 <= src < count and 0 <= dst < count):
            return False
        return src == dst or bool(torch.cuda.can_device_access_peer(src, dst))

    @staticmethod
    def gpu_to_gpu(tensor: Any, device: Any, *, non_blocking: bool = True) -> Any:
        """Copy a CUDA ``tensor`` to ``device``.

        With peer access the copy goes GPU to GPU (CUDA picks P2P for ``.to``); without
        it, through a pinned host buffer so both legs stay asynchronous.

        Raises:
            ValueError: ``tensor`` is not on a GPU or ``device`` is not a GPU.
        """
        target = torch.device(device)
        if tensor.device.type != "cuda" or target.type != "cuda":
            raise ValueError(f"gpu_to_gpu copies between GPUs; got {tensor.device} -> {target}")
        src = tensor.device.index
        dst = target.index if target.index is not None else torch.cuda.current_device()
        if MultiGpuTransfer.can_access_peer(src, dst):
            return tensor.to(target, non_blocking=non_blocking)
        staging = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        staging.copy_(tensor, non_blocking=non_blocking)
        torch.cuda.current_stream(tensor.device).synchronize()  # host copy complete before reuse
        return staging.to(target, non_blocking=non_blocking)
