"""Delivery to the training device: uint8 over PCIe, normalisation on the device."""

from __future__ import annotations

from typing import Any

from ..transforms.output import OutputSpec


def gpu_available() -> bool:
    """True when PyTorch is installed with CUDA and sees a GPU. Never raises."""
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver reports as "no GPU", not as a crash
        return False


def apply_output(images: Any, output: OutputSpec | None, channels_first: bool = True) -> Any:
    """``(images - offset) * factor`` on whatever device ``images`` (uint8 NCHW) lives on.

    The same torch ops run on the CPU in tests and on the GPU in training.
    """
    if output is None:
        return images
    import torch

    dtype = getattr(torch, output.torch_dtype)
    shape = (1, 3, 1, 1)  # NCHW shape also for channels_last tensors (a permuted view)
    offset = torch.as_tensor(output.offset, device=images.device, dtype=torch.float32).view(shape)
    factor = torch.as_tensor(output.factor, device=images.device, dtype=torch.float32).view(shape)
    return ((images.to(torch.float32) - offset) * factor).to(dtype)


class CudaDelivery:
    """Copies pinned host batches to the GPU on a side stream.

    The copy of batch k+1 overlaps the training step on batch k. The host slot may be
    reused only after its copy finished: :meth:`wait_host_free` blocks on that event.
    """

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(device=self.device)

    def copy(self, images: Any, labels: Any, output: OutputSpec | None) -> tuple[Any, Any, Any]:
        torch = self.torch
        with torch.cuda.stream(self.stream):
            gpu_images = images.to(self.device, non_blocking=True)
            gpu_labels = labels.to(self.device, non_blocking=True)
            gpu_images = apply_output(gpu_images, output)
            done = torch.cuda.Event()
            done.record(self.stream)
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(done)
        # Tell the caching allocator these tensors are used on the consumer's stream.
        gpu_images.record_stream(consumer)
        gpu_labels.record_stream(consumer)
        return gpu_images, gpu_labels, done
