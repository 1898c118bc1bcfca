"""Fixtures: real JPEG shards and odd images, generated once per test session, offline."""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

from turbofeed._datagen import make_imagenet_like


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Tar indexes go to a per-session temp dir, never to the user's home."""
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tf-cache"))


@pytest.fixture(scope="session")
def shards(tmp_path_factory) -> str:
    """A folder of 3 WebDataset shards, 40 ImageNet-like JPEGs each (KEY.jpg + KEY.cls)."""
    out = tmp_path_factory.mktemp("shards")
    make_imagenet_like(str(out), count=120, per_shard=40, classes=10, seed=1, progress=False)
    return str(out)


@pytest.fixture(scope="session")
def shard_paths(shards) -> list[str]:
    return sorted(os.path.join(shards, n) for n in os.listdir(shards) if n.endswith(".tar"))


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> str:
    """An ImageFolder tree of 30 JPEGs in class sub-folders."""
    out = tmp_path_factory.mktemp("folder")
    make_imagenet_like(str(out), count=30, classes=4, seed=2, layout="folder", progress=False)
    return str(out)


def _photo(h: int = 96, w: int = 128, seed: int = 0) -> Image.Image:
    """A smooth colourful image (JPEG-friendly, so decoders agree closely)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 6, 3)
    rgb = np.stack([127 + 120 * np.sin(x / 9 + y / 13 + p) for p in phase], axis=-1)
    return Image.fromarray(rgb.clip(0, 255).astype(np.uint8))


def encode(im: Image.Image, fmt: str = "JPEG", **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


@pytest.fixture(scope="session")
def odd_images() -> dict[str, bytes]:
    """Encoded images of every kind the decoder must handle or refuse."""
    base = _photo()
    good = encode(base, quality=90)
    return {
        "rgb": good,
        "gray": encode(base.convert("L"), quality=90),
        "cmyk": encode(base.convert("CMYK"), quality=90),
        "progressive": encode(base, quality=90, progressive=True),
        "png_rgba": encode(base.convert("RGBA"), "PNG"),
        "png_palette": encode(base.convert("P"), "PNG"),
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "garbage": b"this is not an image" * 20,
    }


def write_tar(path: str, members: list[tuple[str, bytes]]) -> str:
    """Write a plain tar with the given (name, payload) members, in order."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


@pytest.fixture
def tar_writer():
    return write_tar
