"""A CPU stand-in for the GPU decoder, so everything around nvJPEG is tested without a GPU."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from turbofeed.decode import decode


class CpuStandInDecoder:
    """Same contract as ``turbofeed.decode.gpu.GpuDecoder`` (``device``, ``decode(datas)``
    -> (3, H, W) uint8 tensors or None), decoding on the CPU into torch tensors. Refuses
    CMYK JPEGs as nvJPEG's RGB path does, and anything libjpeg-turbo/Pillow cannot decode.

    ``calls`` holds the batch size of each ``decode`` call, ``outputs`` every tensor it made;
    ``seconds_per_image`` makes it a "GPU" of known (slow) speed.
    """

    device = torch.device("cpu")

    def __init__(self, seconds_per_image: float = 0.0) -> None:
        self.calls: list[int] = []
        self.outputs: list[torch.Tensor] = []
        self.seconds_per_image = seconds_per_image

    def decode(self, datas):
        self.calls.append(len(datas))
        time.sleep(self.seconds_per_image * len(datas))
        out = []
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


@pytest.fixture
def stand_in() -> CpuStandInDecoder:
    """A fresh :class:`CpuStandInDecoder`."""
    return CpuStandInDecoder()
