"""Batched crop + antialiased resize + flip + normalise as plain torch ops (any device);
:func:`normalize` is the torch implementation of the output op.

Every sample of a batch has its own crop box and source size; all are resized to one
output size in two batched matrix products, so a whole batch is one call on the GPU
and the same code runs (and is tested) on the CPU.

The weights are Pillow's antialiased bilinear ("triangle") coefficients for a box,
the same resampling the CPU path uses: for output pixel ``i`` of a box ``[a, b)`` of
an axis of length ``n`` resized to ``m``::

    scale = (b - a) / m,  fs = max(scale, 1)
    c_i   = a + (i + 0.5) * scale
    w_ix  = max(0, 1 - |x + 0.5 - c_i| / fs)  for source pixel x in [0, n), rows normalised

Pillow rounds to 8 bits between its horizontal and vertical pass; here the
intermediate stays in float, so uint8 results differ from the CPU path by at most
one level. A flip reverses the rows of the horizontal weights, so it costs nothing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from .views import Window

if TYPE_CHECKING:  # output.py runs normalize() for Normalize/ToDtype on tensors
    from .output import OutputSpec


def axis_weights(lengths: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, out: int,
                 padded: int) -> torch.Tensor:
    """Resampling weights of one axis for every sample.

    Args:
        lengths: (N,) source length of each sample along the axis.
        starts, ends: (N,) box bounds along the axis, in source pixels (floats).
        out: output length.
        padded: source length of the padded batch (>= every ``lengths``).

    Returns:
        float32 (N, out, padded); rows sum to 1; zero beyond each sample's length.
    """
    device = starts.device
    scale = (ends - starts) / out
    fs = scale.clamp(min=1.0)
    centers = starts[:, None] + (torch.arange(out, device=device, dtype=torch.float32) + 0.5) * scale[:, None]
    x = torch.arange(padded, device=device, dtype=torch.float32)
    w = (1 - ((x + 0.5)[None, None, :] - centers[:, :, None]).abs() / fs[:, None, None]).clamp(min=0)
    w = w * (x[None, None, :] < lengths[:, None, None])
    return w / w.sum(-1, keepdim=True).clamp(min=1e-12)


def resized_crop(images: torch.Tensor, sizes: torch.Tensor, boxes: torch.Tensor, out_size: tuple[int, int],
                 flips: torch.Tensor | None = None, output: OutputSpec | None = None,
                 channels_last: bool = False) -> torch.Tensor:
    """Crop each image's box, resize to ``out_size``, flip and normalise, batched.

    Args:
        images: (N, 3, H, W) uint8 or float, each image in its top-left corner (padded).
        sizes: (N, 2) the real (height, width) of each image.
        boxes: (N, 4) crop boxes ``(x0, y0, x1, y1)`` in source pixels (floats).
        out_size: (height, width) of the output.
        flips: (N,) bool, mirror left-right.
        output: normalisation (``Normalize``/``ToDtype`` spec); None -> uint8.
        channels_last: return NHWC memory (shape stays NCHW).

    Returns:
        (N, 3, out_h, out_w) tensor on ``images.device``: uint8, or ``output.dtype``.
    """
    n = images.shape[0]
    parts = [sizes.to(torch.float32), boxes.to(torch.float32)]
    if flips is not None:
        parts.append(flips.to(torch.float32).reshape(-1, 1))
    return resample_table(images, torch.cat([p.reshape(n, -1) for p in parts], 1), out_size, output, channels_last)


def resample_table(images: torch.Tensor, table: torch.Tensor, out_size: tuple[int, int],
                   output: OutputSpec | None = None, channels_last: bool = False) -> torch.Tensor:
    """:func:`resized_crop` with its three small tables in one float32 ``table``: (N, 6)
    columns ``height, width, x0, y0, x1, y1``, or (N, 7) with a last column ``flip``
    (1.0 mirrors), on the host or the device. A host table goes to the device in one
    copy (each pageable copy would make the host wait)."""
    _, _, height, width = images.shape
    out_h, out_w = out_size
    table = to_device(table, images.device)
    sizes, boxes = table[:, 0:2], table[:, 2:6]
    wy = axis_weights(sizes[:, 0], boxes[:, 1], boxes[:, 3], out_h, height)  # (N, out_h, H)
    wx = axis_weights(sizes[:, 1], boxes[:, 0], boxes[:, 2], out_w, width)   # (N, out_w, W)
    if table.shape[1] > 6:
        wx = torch.where(table[:, 6, None, None] > 0.5, wx.flip(1), wx)
    pixels = images.to(torch.float32)
    # Horizontal pass first on all rows, then vertical: (N,3,H,W) -> (N,3,H,out_w) -> (N,3,out_h,out_w).
    horizontal = torch.matmul(pixels, wx.transpose(1, 2)[:, None])          # (N, 3, H, out_w)
    result = torch.matmul(wy[:, None], horizontal)                          # (N, 3, out_h, out_w)
    if output is None:
        result = result.round_().clamp_(0, 255).to(torch.uint8)
    else:
        result = normalize(result, output)
    if channels_last:
        result = result.contiguous(memory_format=torch.channels_last)
    return result


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``. A host tensor bound for a CUDA device goes through pinned
    memory without the host waiting: a copy from pageable memory makes the host wait for
    the stream, that is for the batch's decode and resize queued before it."""
    if device.type != "cuda" or tensor.device.type == "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def normalize(images: torch.Tensor, spec: OutputSpec, channels_first: bool = True) -> torch.Tensor:
    """The torch normalisation: ``(x - spec.offset) * spec.factor`` in float32, rounded
    once to ``spec.torch_dtype`` (see :class:`~turbofeed.transforms.output.OutputSpec`):
    the same bits as :func:`turbofeed.transforms.write_slot` and the native decoder.

    Args:
        images: uint8 pixels (or float32 resampled ones), on any device: ``(..., 3, H, W)``
            (``channels_first``; also an NCHW-shaped view of channels_last memory) or
            ``(..., H, W, 3)``.
        spec: the output op (``Normalize(...).spec``, ``ToDtype(...).spec``).
        channels_first: where the channel axis is.

    Returns:
        A new tensor of ``spec.torch_dtype``, the shape of ``images``, on its device.

    The six constants go to the device in one copy, pinned and without the host waiting
    (:func:`to_device`): two pageable copies made the host wait twice per batch for the
    device's queued decode and resize (gpu-review S8).
    """
    shape = (3, 1, 1) if channels_first else (3,)
    table = to_device(torch.from_numpy(np.concatenate((spec.offset, spec.factor)).astype(np.float32)),
                      images.device)
    offset, factor = table[:3].view(shape), table[3:].view(shape)
    return ((images.to(torch.float32) - offset) * factor).to(getattr(torch, spec.torch_dtype))


def default_budget() -> int:
    """Bytes of float work one batched resize may take: ``$TURBOFEED_GPU_BATCH_MB`` (512 MiB)."""
    return int(float(os.environ.get("TURBOFEED_GPU_BATCH_MB", "512")) * 2**20)


def reach(box: Sequence[float], out_size: tuple[int, int], height: int, width: int) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)``: the source pixels the resampling of ``box`` to
    ``out_size`` reads (every weight outside is 0), clamped to the image.

    An output pixel's filter spans ``max(scale, 1)`` source pixels each side of its
    centre (see :func:`axis_weights`); one more pixel of margin covers rounding.
    """
    x0, y0, x1, y1 = box
    out_h, out_w = out_size
    fx = max((x1 - x0) / out_w, 1.0)
    fy = max((y1 - y0) / out_h, 1.0)
    return (max(0, math.floor(y0 - fy) - 1), max(0, math.floor(x0 - fx) - 1),
            min(height, math.ceil(y1 + fy) + 1), min(width, math.ceil(x1 + fx) + 1))


def reaches(boxes: np.ndarray, out_sizes: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """:func:`reach` of every window of a batch at once, the same numbers.

    Args:
        boxes: (N, 4) float64 ``(x0, y0, x1, y1)``.
        out_sizes: (N, 2) each window's output ``(height, width)``.
        sizes: (N, 2) each image's ``(height, width)``.

    Returns:
        int64 (N, 4): ``(top, left, bottom, right)`` per window.
    """
    x0, y0, x1, y1 = boxes.T
    fx = np.maximum((x1 - x0) / out_sizes[:, 1], 1.0)
    fy = np.maximum((y1 - y0) / out_sizes[:, 0], 1.0)
    out = np.empty((len(boxes), 4), np.int64)
    out[:, 0] = np.maximum(0, np.floor(y0 - fy) - 1)
    out[:, 1] = np.maximum(0, np.floor(x0 - fx) - 1)
    out[:, 2] = np.minimum(sizes[:, 0], np.ceil(y1 + fy) + 1)
    out[:, 3] = np.minimum(sizes[:, 1], np.ceil(x1 + fx) + 1)
    return out


def crop_to_reach(image: torch.Tensor, window: Window) -> tuple[torch.Tensor, Window]:
    """A (3, h, w) image cut down to what ``window`` reads (a view, no copy) and the
    window moved into the cut's coordinates: resampling the two gives the same pixels, and
    a small crop of a huge photo no longer pads the whole batch to the photo's size."""
    top, left, bottom, right = reach(window.box, (window.height, window.width), int(image.shape[1]),
                                     int(image.shape[2]))
    x0, y0, x1, y1 = window.box
    return image[:, top:bottom, left:right], replace(window, box=(x0 - left, y0 - top, x1 - left, y1 - top))


def float_bytes(count: int, height: int, width: int, out_size: tuple[int, int]) -> int:
    """Bytes of float32 work :func:`resized_crop` needs for ``count`` images padded to
    ``height x width``: the padded pixels, the horizontal pass and the output."""
    out_h, out_w = out_size
    return 4 * 3 * count * (height * width + height * out_w + out_h * out_w)


def groups_within(shapes: Sequence[tuple[int, int]] | np.ndarray, out_size: tuple[int, int],
                  budget: int | None = None) -> list[range]:
    """Split a batch, in order, into runs whose padded float work (:func:`float_bytes`)
    stays within ``budget`` bytes (default ``$TURBOFEED_GPU_BATCH_MB``, 512 MiB): the
    device memory one batched resize may take, whatever the image sizes. An image too big
    for the budget alone gets a run of its own.

    ``shapes``: each image's ``(h, w)`` (pairs, or an int64 ``(N, 2)`` array). A few NumPy
    operations per run, no Python per image: a run's padded work only grows with each
    image it takes, so it ends before the first image that takes it over the budget."""
    budget = default_budget() if budget is None else budget
    shapes = np.asarray(shapes, np.int64).reshape(-1, 2)
    out_h, out_w = out_size
    runs, start, n = [], 0, len(shapes)
    while start < n:
        height = np.maximum.accumulate(shapes[start:, 0])
        width = np.maximum.accumulate(shapes[start:, 1])
        need = 12 * np.arange(1, n - start + 1) * (height * width + height * out_w + out_h * out_w)
        over = np.flatnonzero(need[1:] > budget)  # the run's first image always stays in it
        stop = start + 1 + int(over[0]) if len(over) else n
        runs.append(range(start, stop))
        start = stop
    return runs


def window_tensors(windows: Sequence[Window]) -> tuple[torch.Tensor, torch.Tensor]:
    """(boxes (N, 4) float32, flips (N,) bool) of CPU-chosen windows, for :func:`resized_crop`."""
    boxes = torch.tensor([w.box for w in windows], dtype=torch.float32).reshape(-1, 4)
    flips = torch.tensor([w.flip for w in windows], dtype=torch.bool)
    return boxes, flips


def pad_batch(images: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack (3, h, w) images of different sizes into one zero-padded (N, 3, H, W) batch.

    Returns:
        (batch, sizes) with sizes (N, 2) the real (height, width) of each image.
    """
    height = max(int(i.shape[1]) for i in images)
    width = max(int(i.shape[2]) for i in images)
    batch = images[0].new_zeros((len(images), 3, height, width))
    for k, image in enumerate(images):
        batch[k, :, :image.shape[1], :image.shape[2]] = image
    sizes = torch.tensor([[i.shape[1], i.shape[2]] for i in images], dtype=torch.float32)
    return batch, sizes
