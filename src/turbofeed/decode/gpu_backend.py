"""Choosing the GPU decoder's backend by what it decodes, not by what imports.

An import says a backend is installed, not that it decodes on the device (gpu-review S2):
torchvision's image extension or its bundled libnvjpeg may fail to load, nvJPEG may fail
to start, an nvImageCodec without nvJPEG decodes on the host. Each decode would then
fail and fall back to the CPU image by image. So the backend is the first of the wanted
ones whose decode of :func:`trial_jpeg` (16x16 pixels of one known colour) comes back
on the device with that colour (:func:`trial_verdict`); :func:`choose_backend` is that
choice, given the trial as a function (``turbofeed.decode.gpu.find_backend`` passes
the real one, which needs a GPU).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from typing import Any

#: The trial image's one colour (RGB) and its size.
TRIAL_COLOUR = (200, 40, 90)
TRIAL_SIZE = 16

#: Mean distance in levels of 255 the trial's pixels may be from TRIAL_COLOUR: a flat
#: colour at quality 95 decodes within a level or two on any IDCT; a wrong decode (grey,
#: swapped channels, another image) is tens of levels off.
TRIAL_TOLERANCE = 8.0

#: What a trial says of a backend whose module is not there.
NOT_INSTALLED = "not installed"


@functools.cache
def trial_jpeg() -> bytes:
    """A baseline 4:2:0 JPEG, :data:`TRIAL_SIZE` square, every pixel :data:`TRIAL_COLOUR`."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (TRIAL_SIZE, TRIAL_SIZE), TRIAL_COLOUR).save(out, "JPEG", quality=95)
    return out.getvalue()


def trial_verdict(image: Any, device: Any) -> str | None:
    """None when ``image`` is :func:`trial_jpeg` decoded right: a (3, 16, 16) uint8
    tensor on ``device`` (a ``torch.device``) within :data:`TRIAL_TOLERANCE` of its
    colour; else what is wrong with it."""
    import torch

    if not isinstance(image, torch.Tensor):
        return f"the decoder returned {type(image).__name__}, not a tensor"
    if image.device != device:
        return f"the image came back on {image.device}, not {device}"
    if image.dtype != torch.uint8 or tuple(image.shape) != (3, TRIAL_SIZE, TRIAL_SIZE):
        return f"the image came back {image.dtype} {tuple(image.shape)}, not uint8 (3, {TRIAL_SIZE}, {TRIAL_SIZE})"
    want = torch.tensor(TRIAL_COLOUR, dtype=torch.float32).view(3, 1, 1)
    off = (image.cpu().float() - want).abs().mean().item()
    if not off < TRIAL_TOLERANCE:
        return f"the pixels are {off:.1f} levels from the colour encoded (at most {TRIAL_TOLERANCE:g})"
    return None


def choose_backend(wanted: Sequence[str], trial: Callable[[str], str | None]) -> tuple[str | None, list[str]]:
    """The first backend of ``wanted`` whose ``trial(name)`` is None (it decoded the trial
    JPEG right on the device), and why each one tried before it was passed over
    (``"nvimgcodec: not installed"``); ``(None, every reason)`` when none was right.

    A trial that raises counts as a failed one, with its error: the choice never raises."""
    passed_over: list[str] = []
    for name in wanted:
        try:
            why = trial(name)
        except Exception as exc:  # a trial's own fault is that backend's failure, not the caller's
            why = f"its trial raised {type(exc).__name__}: {first_line(exc)}"
        if why is None:
            return name, passed_over
        passed_over.append(f"{name}: {why}")
    return None, passed_over


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of ``exc``'s message, at most ``limit`` characters (torch appends
    C++ stack traces to its messages)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else ""
