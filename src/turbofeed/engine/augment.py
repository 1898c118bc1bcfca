"""augment: the user's own callables, per sample in the worker threads.

The fused decode (crop window, resize, flip, an optional output op) runs first, as
everywhere, into a (3, H, W) array; the callables of ``Compose([...fused ops...,
*callables])`` then run in order on it as a torch tensor. A callable that raises, or
returns None (or, last, anything but a tensor or an array), stops the pass with a
:class:`~turbofeed.errors.UserCodeError` naming it, the shard and the key: a bug, not bad
data (:mod:`turbofeed.engine.usercode`; ``user_errors="bad_sample"`` makes it a bad sample
of stage ``augment`` instead, which the bad-sample policy replaces, skips or raises).

Python callables hold the GIL while they run Python code (torch ops release it inside
their kernels), so they share the worker threads' time with the fused decode; see
bench/RESULTS.md for what that costs and how to get around it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..base.stageinfo import StageInfo
from .slots import Slot
from ..errors import UserCodeError
from .stages import PerSample, chw_with_label
from .usercode import name_of, raised, returned, routed
from .work import SampleWork

INFO = StageInfo("decode.cpu", "sample", ("fetch", "decode.cpu", "augment", "errors.augment"))


class UserAugment:
    """Makes one sample: the fused decode of ``work`` (its transform is the fused part
    alone), then ``callables`` on the (3, H, W) tensor; returns ``(tensor, label)``.

    ``first`` is the position of the first callable in the transform's ops (for names:
    ``transform[2]=ColorJitter``); ``user_errors`` as :mod:`turbofeed.engine.usercode`."""

    def __init__(self, work: SampleWork, callables: Sequence[Callable[[Any], Any]], *, first: int = 0,
                 user_errors: str = "raise") -> None:
        import torch

        self.torch = torch
        self.work = work
        self.callables = list(callables)
        self.names = [name_of(f"transform[{first + i}]", fn) for i, fn in enumerate(self.callables)]
        self.user_errors = user_errors
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
        for fn, name in zip(self.callables, self.names):
            try:
                x = fn(x)
            except Exception as exc:
                raise self._user_error(gid, raised, name, exc) from exc
            if x is None:  # the next callable (or the batch) would fail far from the cause
                raise self._user_error(gid, returned, name, x, "a tensor")
        if not isinstance(x, (self.torch.Tensor, np.ndarray)):  # a batch holds tensors
            raise self._user_error(gid, returned, name, x, "a tensor or numpy array (the batch stacks them)")
        self.work.stats.add_times(augment=time.perf_counter() - started)
        return x, label

    def _user_error(self, gid: int, make: Callable[..., UserCodeError], *args: Any) -> Exception:
        """A :class:`UserCodeError` naming the sample, or under ``user_errors="bad_sample"``
        a bad sample of stage ``augment`` saying the same."""
        shard, key = self.work.dataset.describe(gid)
        return routed(make(*args, shard=shard, key=key), self.user_errors, self.work, gid)

    def _decoded(self, gid: int) -> tuple[np.ndarray, int]:
        if self.row is None:
            return chw_with_label(gid, self.work.load(gid))
        shape, dtype = self.row
        slot = Slot(np.empty(shape, dtype), np.empty(1, np.int64))
        self.work.into_slot(gid, slot, 0, channels_first=True)
        return slot.images[0], int(slot.labels[0])


def augment_stage(work: SampleWork, batch_size: int, callables: Sequence[Callable[[Any], Any]], *,
                  first: int = 0, user_errors: str = "raise") -> PerSample:
    """The decode stage of a pass with user callables: fused decode, then the callables
    (``first``, ``user_errors``: see :class:`UserAugment`)."""
    return PerSample(INFO, batch_size, UserAugment(work, callables, first=first, user_errors=user_errors))
