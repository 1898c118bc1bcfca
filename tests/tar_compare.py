"""tarscan and the index against Python's ``tarfile`` on one shard (importable by every
test module: pytest's ``pythonpath`` holds ``tests/``)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from turbofeed.io.local import index as index_module
from turbofeed.io.local.tarscan import fast_members


def tarfile_members(path: Path) -> list[tuple[str, int, int]]:
    with tarfile.open(path) as tf:
        return [(m.name, m.offset_data, m.size) for m in tf if m.isfile()]


def scan_both(path: Path, monkeypatch) -> tuple:
    """The index's ``_scan`` as it is (fast walk first) and with tarfile alone."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        fast = index_module._scan(f, size)
    with open(path, "rb") as f, monkeypatch.context() as m:
        m.setattr(index_module, "fast_members", lambda fd, size: None)
        slow = index_module._scan(f, size)
    return fast, slow


def walked(path: Path) -> list[tuple[str, int, int]] | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        return fast_members(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
