"""Types of the C extension ``turbofeed.decode._crop`` (``csrc/module.c``); see its docstrings."""

from collections.abc import Sequence
from typing import Any

import numpy as np
from typing_extensions import Buffer

# ``out`` (and ``resize``'s ``pixels``): a C-contiguous NumPy array or other buffer; ``out``
# is written, uint8, or float32 when ``offset`` and ``factor`` are given.
def crop_resize(data: Buffer | np.ndarray, x0: float, y0: float, x1: float, y1: float, out: Any, out_h: int,
                out_w: int, flip: bool = ..., channels_first: bool = ..., dct_scale: bool = ...,
                offset: Sequence[float] | None = ..., factor: Sequence[float] | None = ...,
                max_pixels: int = ..., check_scan: bool = ...) -> None: ...
def resize(pixels: Any, x0: float, y0: float, x1: float, y1: float, out: Any, out_h: int, out_w: int,
           flip: bool = ..., channels_first: bool = ..., offset: Sequence[float] | None = ...,
           factor: Sequence[float] | None = ..., max_pixels: int = ...) -> None: ...
def check(data: Buffer | np.ndarray, max_pixels: int = ...) -> None: ...
def header(data: Buffer | np.ndarray, /) -> tuple[int, int, str]: ...
def _simd(level: str | None = ..., /) -> str: ...
