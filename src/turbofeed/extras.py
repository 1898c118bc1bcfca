"""Optional dependencies (h5py, zarr, pyarrow, PyYAML, ...), imported only when a feature needs
them; a missing one raises :class:`~turbofeed.errors.MissingExtra` naming the pip command."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtra

__all__ = ["MissingExtra", "require"]  # MissingExtra lives in turbofeed.errors (shared with torch)


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` naming ``pip install 'turbofeed[extra]'``.

    Args:
        module: the import name (``h5py``, ``zarr``, ``pyarrow.parquet``).
        extra: the turbofeed extra that installs it (``hdf5``, ``zarr``, ``parquet``).
        what: what the user asked to read, for the message (``HDF5 file data.h5``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"reading {what} needs the optional package {module.split('.')[0]!r}: "
                           f"pip install 'turbofeed[{extra}]' ({exc})") from exc
