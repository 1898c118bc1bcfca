"""The one small interface every storage backend implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .table import SampleTable


@runtime_checkable
class Source(Protocol):
    """A readable collection of samples: a tar shard, an image folder, later an S3 prefix.

    ``path`` names the source in messages; ``table`` lists its samples; ``read(i)``
    returns the encoded image bytes of sample ``i`` (an index into ``table``), or its
    uint8 pixels for the array formats (HDF5, Zarr, .npy), and must be safe to call
    from many threads at once; ``close()`` releases handles and may be called more
    than once.
    """

    path: str
    table: SampleTable

    def read(self, i: int) -> bytes | np.ndarray: ...

    def close(self) -> None: ...
