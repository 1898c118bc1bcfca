"""ImageNet-like JPEG datasets from real photographs, for demos, tests and benchmarks.

Same recipe as ``shared/bench/make_imagenet_like.py`` (random crop of a real photo,
ImageNet-like size, flip, colour shift, sensor-like noise, baseline 4:2:0 JPEG at
quality 80-95), but from the few public-domain photos shipped in the package, so it
needs no extra downloads. Deterministic for a given seed.
"""

from __future__ import annotations

import io
import os
import re
import shutil
from importlib import resources

import numpy as np
from PIL import Image
from ._deps import tqdm

from .io import FolderSource
from .io.local.writer import ShardWriter


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
    im = src.crop((x0, y0, x0 + cw, y0 + ch)).resize(size, Image.Resampling.BILINEAR)
    if rng.random() < 0.5:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    a: np.ndarray = np.asarray(im, dtype=np.float32)
    a = a * rng.uniform(0.8, 1.2, size=3) + rng.normal(0, 9.0, size=a.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(
        buf, "JPEG", quality=int(rng.choice([80, 90, 92, 95, 95])), subsampling=2)
    return buf.getvalue()


# What make-dataset writes: shards (and their unpublished ``.tmp``) or class folders of
# numbered JPEGs. Only these may be replaced with ``force``.
_OWN_SHARD = re.compile(r"shard-\d{6}\.tar(\.tmp)?")
_OWN_CLASS = re.compile(r"class\d{4}")
_OWN_IMAGE = re.compile(r"\d{8}\.jpg")
# the dataset index a loader (or `turbofeed index`) built over the shards, its lock and a
# killed build's temporary file: derived from the shards, replaced with them
_OWN_INDEX = re.compile(r"turbofeed\.index|\.turbofeed\.index\.lock|\.turbofeed\.index-\w+\.tmp")


def _own_entries(out: str, names: list[str]) -> tuple[list[str], list[str]]:
    """Split the entries of ``out`` into (written by make-dataset, anything else)."""
    own, foreign = [], []
    for name in names:
        path = os.path.join(out, name)
        if os.path.isfile(path) and (_OWN_SHARD.fullmatch(name) or _OWN_INDEX.fullmatch(name)):
            own.append(name)
        elif (os.path.isdir(path) and not os.path.islink(path) and _OWN_CLASS.fullmatch(name)
              and all(_OWN_IMAGE.fullmatch(n) for n in os.listdir(path))):
            own.append(name)
        else:
            foreign.append(name)
    return own, foreign


def prepare_output(out: str, *, force: bool = False) -> None:
    """Make ``out`` an empty folder for a new dataset.

    A folder that already holds files is refused: shards of an earlier, bigger run would
    stay next to the new ones and silently join the dataset (a second run with
    ``count=4`` into a folder of 8 would read as 8 images). With ``force`` the shards and
    class folders an earlier make-dataset wrote are deleted first; files it did not
    write are never deleted, and their presence is still refused.

    Raises:
        FileExistsError: ``out`` is not empty (or, with ``force``, holds foreign files).
        OSError: ``out`` cannot be created (a plain file on the way, no permission).
    """
    try:
        names = sorted(os.listdir(out))
    except FileNotFoundError:
        os.makedirs(out)
        return
    if not names:
        return
    if not force:
        raise FileExistsError(
            f"{out} is not empty ({len(names)} entries, e.g. {names[0]!r}): old shards would join the new "
            "dataset; use an empty folder, or --force (force=True) to replace an earlier make-dataset's output")
    own, foreign = _own_entries(out, names)
    if foreign:
        raise FileExistsError(
            f"{out} holds {len(foreign)} entries make-dataset did not write (e.g. {foreign[0]!r}); --force only "
            "replaces its own shard-NNNNNN.tar files and classNNNN folders: use an empty folder")
    for name in own:
        path = os.path.join(out, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def _at_least_one(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def make_imagenet_like(out: str, *, count: int = 5000, per_shard: int = 1000, classes: int = 100,
                       seed: int = 0, layout: str = "wds", progress: bool = True, force: bool = False) -> list[str]:
    """Write ``count`` images as tar shards (``layout="wds"``, KEY.jpg + KEY.cls) or as an
    ImageFolder tree (``layout="folder"``). Returns the shard paths or the class folders.

    ``out`` must be absent or empty; ``force=True`` first deletes an earlier run's output
    there (see :func:`prepare_output`).

    Raises:
        ValueError: ``count``, ``per_shard`` or ``classes`` below 1, a negative ``seed``,
            or an unknown ``layout``; checked before anything is written.
        FileExistsError: ``out`` is in use (see :func:`prepare_output`).
    """
    if layout not in ("wds", "folder"):
        raise ValueError(f"layout must be 'wds' or 'folder', got {layout!r}")
    _at_least_one(count=count, per_shard=per_shard, classes=classes)
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    photos = _photos()
    prepare_output(out, force=force)
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


def folder_to_shards(root: str, out: str, *, per_shard: int = 1000, progress: bool = True,
                     force: bool = False) -> list[str]:
    """Convert an ImageFolder tree to tar shards (``KEY.<ext>`` + ``KEY.cls`` with the
    class id torchvision would assign), in sorted order. Image bytes are copied as is.

    ``out`` must be absent or empty, or ``force=True`` (see :func:`prepare_output`).
    """
    _at_least_one(per_shard=per_shard)
    source = FolderSource(root)
    table = source.table
    prepare_output(out, force=force)
    with ShardWriter(os.path.join(out, "shard-%06d.tar"), per_shard) as writer:
        for i in tqdm(range(len(table)), desc="turbofeed: convert", unit="img", disable=None if progress else True):
            ext = table.image_names[i].rsplit(".", 1)[-1].lower()
            members = {ext: source.read(i)}
            if table.labels[i] is not None:
                members["cls"] = str(table.labels[i]).encode()
            writer.write(table.keys[i], members)
    return writer.shards
