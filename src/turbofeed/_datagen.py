"""ImageNet-like JPEG datasets from real photographs, for demos, tests and benchmarks.

Same recipe as ``shared/bench/make_imagenet_like.py`` (random crop of a real photo,
ImageNet-like size, flip, colour shift, sensor-like noise, baseline 4:2:0 JPEG at
quality 80-95), but from the few public-domain photos shipped in the package, so it
needs no extra downloads. Deterministic for a given seed.
"""

from __future__ import annotations

import io
import os
from importlib import resources

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from .io.folder import FolderSource
from .io.writer import ShardWriter


def _photos() -> list[Image.Image]:
    folder = resources.files("turbofeed") / "_photos"
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".jpg"))
    return [Image.open(io.BytesIO((folder / n).read_bytes())).convert("RGB") for n in names]


def synth_jpeg(rng: np.random.Generator, photos: list[Image.Image]) -> bytes:
    """One ImageNet-like JPEG (short side 200-600 px, aspect 3:4 .. 16:9)."""
    src = photos[rng.integers(len(photos))]
    w, h = src.size
    area = w * h * rng.uniform(0.3, 1.0)
    aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(16 / 9)))
    cw, ch = int(min(w, np.sqrt(area * aspect))), int(min(h, np.sqrt(area / aspect)))
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    short = int(np.clip(rng.normal(400, 90), 200, 600))
    size = (short, int(short * ch / cw)) if cw < ch else (int(short * cw / ch), short)
    im = src.crop((x0, y0, x0 + cw, y0 + ch)).resize(size, Image.BILINEAR)
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    a = np.asarray(im, dtype=np.float32)
    a = a * rng.uniform(0.8, 1.2, size=3) + rng.normal(0, 9.0, size=a.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(
        buf, "JPEG", quality=int(rng.choice([80, 90, 92, 95, 95])), subsampling=2)
    return buf.getvalue()


def make_imagenet_like(out: str, *, count: int = 5000, per_shard: int = 1000, classes: int = 100,
                       seed: int = 0, layout: str = "wds", progress: bool = True) -> list[str]:
    """Write ``count`` images as tar shards (``layout="wds"``, KEY.jpg + KEY.cls) or as an
    ImageFolder tree (``layout="folder"``). Returns the shard paths or the class folders."""
    if layout not in ("wds", "folder"):
        raise ValueError(f"layout must be 'wds' or 'folder', got {layout!r}")
    rng = np.random.default_rng(seed)
    photos = _photos()
    os.makedirs(out, exist_ok=True)
    bar = tqdm(total=count, desc="turbofeed: make-dataset", unit="img", disable=None if progress else True)
    folders: set[str] = set()
    with ShardWriter(os.path.join(out, "shard-%06d.tar"), per_shard) as writer:
        for i in range(count):
            jpg = synth_jpeg(rng, photos)
            label = int(rng.integers(classes))
            key = f"{i:08d}"
            if layout == "wds":
                writer.write(key, {"jpg": jpg, "cls": str(label).encode()})
            else:
                folder = os.path.join(out, f"class{label:04d}")
                os.makedirs(folder, exist_ok=True)
                folders.add(folder)
                with open(os.path.join(folder, key + ".jpg"), "wb") as f:
                    f.write(jpg)
            bar.update()
    bar.close()
    return writer.shards if layout == "wds" else sorted(folders)


def folder_to_shards(root: str, out: str, *, per_shard: int = 1000, progress: bool = True) -> list[str]:
    """Convert an ImageFolder tree to tar shards (``KEY.<ext>`` + ``KEY.cls`` with the
    class id torchvision would assign), in sorted order. Image bytes are copied as is."""
    source = FolderSource(root)
    table = source.table
    with ShardWriter(os.path.join(out, "shard-%06d.tar"), per_shard) as writer:
        for i in tqdm(range(len(table)), desc="turbofeed: convert", unit="img", disable=None if progress else True):
            ext = table.image_names[i].rsplit(".", 1)[-1].lower()
            members = {ext: source.read(i)}
            if table.labels[i] is not None:
                members["cls"] = str(table.labels[i]).encode()
            writer.write(table.keys[i], members)
    return writer.shards
