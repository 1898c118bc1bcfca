"""DALI is an optional extra: imported when a reader is built, never by ``import turbofeed``."""

from __future__ import annotations

from types import ModuleType

from ..errors import MissingExtra

#: What to run where DALI is missing (the CUDA 12 build also runs CPU-only pipelines).
DALI_FIX = "pip install 'turbofeed[dali]' (or: pip install nvidia-dali-cuda120)"


def dali_fn() -> tuple[ModuleType, ModuleType]:
    """``(nvidia.dali.fn, nvidia.dali.types)``.

    Raises:
        MissingExtra: (an ImportError) DALI cannot be imported; names the pip command.
    """
    try:
        from nvidia.dali import fn, types
    except ImportError as exc:
        raise MissingExtra(f"turbofeed.dali needs NVIDIA DALI, which cannot be imported here ({exc}): "
                           f"{DALI_FIX}") from exc
    return fn, types


def current_batch_size(what: str) -> int:
    """The maximum batch size of the pipeline being defined (``@pipeline_def``'s ``batch_size``).

    Raises:
        RuntimeError: called outside a pipeline definition.
    """
    from nvidia.dali.pipeline import Pipeline

    pipe = Pipeline.current()
    if pipe is None:
        raise RuntimeError(f"{what} must be called inside a DALI pipeline definition (@pipeline_def or "
                           f"`with pipe:`); it takes the batch size from the pipeline")
    return int(pipe.max_batch_size)
