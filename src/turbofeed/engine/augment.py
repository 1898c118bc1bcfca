"""augment: the user's own callables, per sample in the worker threads.

The fused decode (crop window, resize, flip, an optional output op) runs first, as
everywhere, into a (3, H, W) array; the callables of ``Compose([...fused ops...,
*callables])`` then run in order on it as a torch tensor. A callable that raises makes
the sample a bad one (stage ``augment``, its key and the callable in the message), so
the bad-sample policy replaces, skips or raises as for an undecodable image.

Python callables hold the GIL while they run Python code (torch ops release it inside
their kernels), so they share the worker threads' time with the fused decode; see
bench/RESULTS.md for what that costs and how to get around it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .slots import Slot
from .stages import PerSample, StageInfo, chw_with_label
from .work import SampleWork

INFO = StageInfo("decode.cpu", "sample", ("fetch", "decode.cpu", "augment", "errors.augment"))


class UserAugment:
    """Makes one sample: the fused decode of ``work`` (its transform is the fused part
    alone), then ``callables`` on the (3, H, W) tensor; returns ``(tensor, label)``."""

    def __init__(self, work: SampleWork, callables: Sequence[Callable[[Any], Any]]) -> None:
        import torch

        self.torch = torch
        self.work = work
        self.callables = list(callables)
        transform = work.transform
        size = None if transform is None else transform.size
        spec = None if transform is None else transform.output
        self.row: tuple[tuple[int, int, int, int], np.dtype] | None = None
        if size is not None:  # one size: decode straight into a one-row slot, channels first
            self.row = ((1, 3, *size), np.dtype(np.uint8) if spec is None else spec.dtype)

    def __call__(self, gid: int) -> tuple[Any, int]:
        pixels, label = self._decoded(gid)
        x = self.torch.from_numpy(pixels)
        started = time.perf_counter()
        for fn in self.callables:
            try:
                x = fn(x)
            except Exception as exc:
                raise self.work.error(gid, "augment", _Raised(fn, exc)) from exc
        self.work.stats.add_times(augment=time.perf_counter() - started)
        return x, label

    def _decoded(self, gid: int) -> tuple[np.ndarray, int]:
        if self.row is None:
            return chw_with_label(gid, self.work.load(gid))
        shape, dtype = self.row
        slot = Slot(np.empty(shape, dtype), np.empty(1, np.int64))
        self.work.into_slot(gid, slot, 0, channels_first=True)
        return slot.images[0], int(slot.labels[0])


class _Raised(Exception):
    """What a user callable raised, said with the callable's name."""

    def __init__(self, fn: Callable[[Any], Any], exc: BaseException) -> None:
        name = getattr(fn, "__qualname__", None) or repr(fn)
        super().__init__(f"{name} raised {type(exc).__name__}: {exc}")


def augment_stage(work: SampleWork, batch_size: int, callables: Sequence[Callable[[Any], Any]]) -> PerSample:
    """The decode stage of a pass with user callables: fused decode, then the callables."""
    return PerSample(INFO, batch_size, UserAugment(work, callables))
