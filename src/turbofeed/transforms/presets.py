"""The ImageNet recipes most training scripts use."""

from __future__ import annotations

from .compose import Compose
from .geometry import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize, check_size
from .output import Normalize


def imagenet_train(size: int = 224, *, normalize: bool = False,
                   scale: tuple[float, float] = (0.08, 1.0)) -> Compose:
    """RandomResizedCrop(size, scale) + RandomHorizontalFlip; uint8 unless ``normalize``
    (then float32 with ImageNet mean/std)."""
    check_size("imagenet_train", size)
    ops: list = [RandomResizedCrop(size, scale=scale), RandomHorizontalFlip()]
    return Compose(ops + [Normalize()] if normalize else ops)


def imagenet_eval(size: int = 224, *, resize: int | None = None, normalize: bool = False) -> Compose:
    """Resize(short side ``resize``, default ``size * 256 / 224``) + CenterCrop(size)."""
    check_size("imagenet_eval", size)  # before size * 256 / 224 hides which argument was wrong
    # ``is None``, not ``or``: resize=0 is a mistake to report, not a request for the default
    ops: list = [Resize(resize if resize is not None else int(size * 256 / 224)), CenterCrop(size)]
    return Compose(ops + [Normalize()] if normalize else ops)
