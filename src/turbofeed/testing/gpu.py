"""A CPU stand-in for the GPU decoder, so everything around nvJPEG (threads, windows,
fallback, policy, batched augmentation, hybrid split) runs without a GPU: turbofeed's GPU
tests use it, and so does the GPU check's dry run (``scripts/gpu_check.sh --dry-run``).

    loader = turbofeed.DataLoader(shards, gpu_decode=CpuStandInDecoder(), transform=T.imagenet_train(224))

What it cannot show (a real GPU run must): CUDA streams and events, batch-wide failures
(nvJPEG fails a whole batch, the stand-in refuses image by image), nvJPEG's pixels and
which odd images it accepts.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


class CpuStandInDecoder:
    """Same contract as ``turbofeed.decode.gpu.GpuDecoder`` (``device``, ``decode(datas)``
    -> (3, H, W) uint8 tensors or None), decoding on the CPU into torch tensors. Refuses
    CMYK JPEGs as nvJPEG's RGB path does, and anything libjpeg-turbo/Pillow cannot decode.

    Args:
        seconds_per_image: sleep this long per image: a "GPU" of known (slow) speed.

    Attributes:
        calls: the batch size of each ``decode`` call.
        outputs: every tensor it made.
        description: what it is, as ``GpuDecoder.description`` says which backend runs
            (the GPU check records it in each row).
    """

    description = "CPU stand-in (turbofeed.testing.CpuStandInDecoder)"

    def __init__(self, seconds_per_image: float = 0.0) -> None:
        import torch

        self.device = torch.device("cpu")
        self.calls: list[int] = []
        self.outputs: list[Any] = []
        self.seconds_per_image = seconds_per_image

    def decode(self, datas: list[bytes]) -> list[Any | None]:
        import torch

        from ..decode import decode

        self.calls.append(len(datas))
        time.sleep(self.seconds_per_image * len(datas))
        out: list[Any | None] = []
        for data in datas:
            if b"Adobe" in data[:200]:  # Pillow writes an Adobe marker into CMYK JPEGs
                out.append(None)
                continue
            try:
                out.append(torch.from_numpy(np.ascontiguousarray(decode(data).transpose(2, 0, 1))))
            except ValueError:
                out.append(None)
        self.outputs += [t for t in out if t is not None]
        return out
