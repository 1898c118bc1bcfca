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
    """``(images - offset) * factor`` on whatever device ``images`` (uint8 NCHW, also an
    NCHW-shaped view of channels_last memory; NHWC-shaped when not ``channels_first``)
    lives on: :func:`turbofeed.transforms.batched.normalize`, or ``images`` itself when
    there is no output op.

    The same torch ops run on the CPU in tests and on the GPU in training.
    """
    if output is None:
        return images
    from ..transforms.batched import normalize  # imports torch

    return normalize(images, output, channels_first)


class CudaDelivery:
    """Copies pinned host batches to the GPU on a side stream.

    The copy of batch k+1 overlaps the training step on batch k. The host slot may be
    reused only after its copy finished: :meth:`wait_host_free` blocks on that event.
    """

    def __init__(self, device: Any) -> None:
        import torch

        from ..engine.gpu import side_stream

        self.torch = torch
        self.device = torch.device(device)
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.stream = side_stream(self.device)  # one per device: a new one per epoch strands cached memory

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
