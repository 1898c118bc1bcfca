"""Shared by the peer scripts (stdlib + numpy only): arguments, the data, torchvision's
RandomResizedCrop parameters, and the timing loop that prints one JSON line."""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import json
import math
import os
import random
import tarfile
import time
from collections.abc import Callable, Iterable

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def parse(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", required=True, help="folder of WebDataset shards (KEY.jpg + KEY.cls)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs")
    ap.add_argument("--warmup", type=int, default=1, help="untimed epochs first")
    ap.add_argument("--pipeline", choices=["train", "eval", "train-float", "train-jitter"], default="train")
    ap.add_argument("--cache", default=os.path.join(os.path.dirname(__file__), "..", ".data", "peers"),
                    help="where peers keep converted data (FFCV .beton, merged tar)")
    return ap.parse_args()


def shards(data: str) -> list[str]:
    found = sorted(glob.glob(os.path.join(data, "*.tar")))
    if not found:
        raise SystemExit(f"no .tar shards in {data}")
    return found


def members(paths: list[str]) -> list[tuple[str, int, int, int]]:
    """(shard, jpg offset, jpg size, label) per sample, in storage order."""
    out = []
    for path in paths:
        with tarfile.open(path) as tar:
            pending: dict[str, dict] = {}
            for m in tar:
                key, ext = m.name.split(".", 1)
                entry = pending.setdefault(key, {})
                if ext == "jpg":
                    entry["jpg"] = (m.offset_data, m.size)
                elif ext == "cls":
                    entry["cls"] = int(tar.extractfile(m).read())
            for key, e in pending.items():
                out.append((path, e["jpg"][0], e["jpg"][1], e["cls"]))
    return out


def read(item: tuple[str, int, int, int]) -> bytes:
    """The JPEG bytes of one members() entry (positioned read: no shared file offset)."""
    path, offset, size, _ = item
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def version(distribution: str) -> str:
    """Installed version of a distribution; module __version__ strings can be stale
    (ffcv 1.0.2 reports 0.0.3rc1)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def jitter(x):
    """A user augmentation written in torch ops on a uint8 (3, H, W) tensor, the same in
    every peer that runs ``train-jitter``: brightness and contrast jitter (factors in
    [0.8, 1.2]), as ``ColorJitter(0.2, 0.2)`` does."""
    import torch

    brightness, contrast = (0.8 + 0.4 * torch.rand(2)).tolist()
    f = x.float() * brightness
    mean = f.mean()
    return ((f - mean) * contrast + mean).clamp_(0, 255).to(torch.uint8)


def rrc_params(width: int, height: int, rng: random.Random, scale=(0.08, 1.0),
               ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """torchvision RandomResizedCrop.get_params: (left, top, w, h)."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        h, w = height, int(round(height * ratio[1]))
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def eval_geometry(width: int, height: int, resize: int = 256, crop: int = 224) -> tuple[int, int, int, int]:
    """torchvision Resize(resize) (short side) + CenterCrop(crop): (resized w, resized h, left, top)."""
    s = resize / min(width, height)
    rw, rh = max(resize, int(width * s)), max(resize, int(height * s))
    return rw, rh, int(round((rw - crop) / 2)), int(round((rh - crop) / 2))


def _images(batch):
    """The image array of a batch: (images, labels, ...) tuples and lists, or a bare array."""
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def run(peer: str, version: str, args: argparse.Namespace, epoch: Callable[[int], Iterable],
        count: Callable[[object], int] = lambda batch: len(_images(batch))) -> None:
    """Warm-up epochs, then timed epochs; images/s = images delivered / epoch wall time.

    Prints one JSON line. "output" is the dtype and shape of the first batch, so a table
    can show that every peer delivered the same thing (uint8 or float32, 224x224)."""
    rates, images, output = [], 0, None
    for e in range(args.warmup + args.epochs):
        started, images = time.perf_counter(), 0
        for batch in epoch(e):
            if output is None and hasattr(_images(batch), "dtype"):
                output = f"{_images(batch).dtype} {tuple(_images(batch).shape)}"
            images += count(batch)
        if e >= args.warmup:
            rates.append(images / (time.perf_counter() - started))
    print(json.dumps({"peer": peer, "pipeline": args.pipeline, "images_per_s": rates, "images": images,
                      "version": version, "output": output, "batch_size": args.batch_size,
                      "workers": args.workers}), flush=True)


def unsupported(peer: str, args: argparse.Namespace, reason: str) -> None:
    print(json.dumps({"peer": peer, "pipeline": args.pipeline, "unsupported": reason}), flush=True)
