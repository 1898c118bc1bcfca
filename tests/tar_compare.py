"""tarscan and the index against Python's ``tarfile`` on one shard (importable by every
test module: pytest's ``pythonpath`` holds ``tests/``).

Every walk here runs both header walks, the Python one (``fast_members``) and the
native extension's (``tar_walk``, where it is built), and checks they agree, so each
shard a tarscan test builds checks the native walk too; :func:`scan_both` checks the
dataset index's array scan (both walks, then ``tarfile``) against ``scan_members``."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from turbofeed.decode import native
from turbofeed.io.local import index as index_module
from turbofeed.io.local.members import scan_arrays, walk
from turbofeed.io.local.tarscan import fast_members


def tarfile_members(path: Path) -> list[tuple[str, int, int]]:
    with tarfile.open(path) as tf:
        return [(m.name, m.offset_data, m.size) for m in tf if m.isfile()]


def both_walks(fd: int, size: int) -> list[tuple[str, int, int]] | None:
    """``fast_members(fd, size)``, checked against the native walk where it is built."""
    found = fast_members(fd, size)
    if native.available():
        arrays = walk(fd, size, use_native=True)
        assert (arrays is None) == (found is None), ("native walk", arrays is None, "python walk", found is None)
        assert arrays is None or arrays.as_tuples() == found
    return found


def scan_both(path: Path, monkeypatch) -> tuple:
    """The index's ``_scan`` as it is (fast walk first) and with tarfile alone; the
    array scan (native and Python walks) checked against ``scan_members`` on the way."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        fast = index_module._scan(f, size)
    with open(path, "rb") as f, monkeypatch.context() as m:
        m.setattr(index_module, "fast_members", lambda fd, size: None)
        slow = index_module._scan(f, size)
    with open(path, "rb") as f:
        members, damage = index_module.scan_members(f, size)
        for use_native in (False, True) if native.available() else (False,):
            arrays, found = scan_arrays(f, size, use_native=use_native)
            assert (arrays.as_tuples(), found) == (members, damage), use_native
    return fast, slow


def walked(path: Path) -> list[tuple[str, int, int]] | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        return both_walks(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
