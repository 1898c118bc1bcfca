"""Real test data, built in memory: small JPEGs and tar shards (importable by every test
module: pytest's ``pythonpath`` holds ``tests/``)."""

from __future__ import annotations

import io
import socket
import tarfile

import numpy as np
from PIL import Image


def photo(h: int = 96, w: int = 128, seed: int = 0) -> Image.Image:
    """A smooth colourful image (JPEG-friendly, so decoders agree closely)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    phase = np.random.default_rng(seed).uniform(0, 6, 3)
    rgb = np.stack([127 + 120 * np.sin(x / 9 + y / 13 + p) for p in phase], axis=-1)
    return Image.fromarray(rgb.clip(0, 255).astype(np.uint8))


def encode(im: Image.Image, fmt: str = "JPEG", **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def small_jpeg(seed: int, size: int = 32) -> bytes:
    """A ``size`` x ``size`` JPEG of 8-pixel blocks of random colour, different per seed."""
    rng = np.random.default_rng(seed)
    cells = rng.integers(0, 255, (size // 8, size // 8, 3), dtype=np.uint8)
    return encode(Image.fromarray(np.repeat(np.repeat(cells, 8, 0), 8, 1)), quality=90)


def tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    """A plain (ustar) tar of the ``(name, payload)`` members, in order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def write_tar(path: str, members: list[tuple[str, bytes]]) -> str:
    """Write :func:`tar_bytes` of ``members`` to ``path``; returns ``path``."""
    with open(path, "wb") as f:
        f.write(tar_bytes(members))
    return str(path)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for torchrun's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
