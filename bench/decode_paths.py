#!/usr/bin/env python3
"""Per-sample CPU paths, JPEG bytes -> 224x224 RandomResizedCrop + flip in a batch slot,
with N threads over the same in-memory JPEGs, and (optionally) the whole DataLoader.

    turbofeed make-dataset /tmp/nat --count 1000
    python bench/decode_paths.py /tmp/nat --threads 2 --rounds 3

Rows (images/s, median over rounds; rows are interleaved round-robin so machine noise
hits all alike; "vs a" is the median over rounds of the ratio to row a in the same round):

    a  simplejpeg full decode only, pixels dropped at once (the decode ceiling)
    b  the Python path: probe + window + simplejpeg full decode + Pillow resize with the
       box + flip/transpose into the slot (turbofeed without the extension)
    c  native: header + window + turbofeed.decode.native.crop_resize into the slot
    c' the same with dct_scale=True
    d  turbofeed.DataLoader, batch 64, imagenet_train(224), uint8: Python path / native
       (with --loader; needs torch)

img/CPU-s: images per CPU-second of the whole process, less sensitive than images/s to
other work on a shared machine (with N threads busy, images/s is at most N times it).
"""

from __future__ import annotations

import argparse
import os
import random

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads only add noise here

import statistics
import sys
import tarfile
import threading
import time

import numpy as np
import simplejpeg

from turbofeed.decode import decode, native, probe
from turbofeed.transforms import imagenet_train, resample, write_slot


def read_jpegs(path: str, limit: int) -> list[bytes]:
    """JPEG bytes from tar shards (or image files) under ``path``."""
    out: list[bytes] = []
    names = sorted(os.path.join(root, n) for root, _, files in os.walk(path) for n in files)
    for name in names:
        if name.endswith(".tar"):
            with tarfile.open(name) as tar:
                out += [tar.extractfile(m).read() for m in tar.getmembers() if m.name.lower().endswith((".jpg", ".jpeg"))]
        elif name.lower().endswith((".jpg", ".jpeg")):
            with open(name, "rb") as f:
                out.append(f.read())
        if len(out) >= limit:
            break
    return out[:limit]


def run_threads(fn, datas: list[bytes], threads: int) -> tuple[float, float]:
    """(images/s, images per CPU-second of the process) of ``fn(data, i, slot)`` over
    ``datas`` split among ``threads`` threads."""
    parts = [range(t, len(datas), threads) for t in range(threads)]
    slots = [np.empty((3, 224, 224), np.uint8) for _ in range(threads)]

    def work(t: int) -> None:
        for i in parts[t]:
            fn(datas[i], i, slots[t])

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    started, cpu = time.perf_counter(), time.process_time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return len(datas) / (time.perf_counter() - started), len(datas) / (time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="folder of tar shards or JPEGs (turbofeed make-dataset DIR)")
    parser.add_argument("--count", type=int, default=1000, help="images (default 1000)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of every row (median)")
    parser.add_argument("--loader", action="store_true", help="also time the whole DataLoader")
    args = parser.parse_args()

    datas = read_jpegs(args.data, args.count)
    if not datas:
        sys.exit(f"no JPEGs under {args.data}")
    recipe = imagenet_train(224)

    def window_of(i: int, height: int, width: int):
        return recipe.window(height, width, random.Random(i))

    def ceiling(data: bytes, i: int, slot: np.ndarray) -> None:
        simplejpeg.decode_jpeg(data, colorspace="RGB")

    def python_path(data: bytes, i: int, slot: np.ndarray) -> None:
        info = probe(data)
        window = window_of(i, info.height, info.width)
        write_slot(resample(decode(data), window), slot, flip=window.flip, channels_first=True, output=None)

    def native_path(dct: bool):
        def run(data: bytes, i: int, slot: np.ndarray) -> None:
            height, width, _ = native.header(data)
            window = window_of(i, height, width)
            native.crop_resize(data, window.box, slot, flip=window.flip, channels_first=True, dct_scale=dct)
        return run

    rows = {"a  simplejpeg full decode only": ceiling, "b  Python path (decode + Pillow resize)": python_path}
    if native.available():
        rows["c  native crop_resize"] = native_path(False)
        rows["c' native crop_resize, dct_scale"] = native_path(True)
    else:
        print("turbofeed.decode._crop is not built: no native rows", file=sys.stderr)
    if args.loader:
        rows.update(loader_rows(args))

    for fn in rows.values():  # warm-up: allocators, per-thread decoder state
        if not getattr(fn, "loader", False):
            run_threads(fn, datas[:100], args.threads)
    results: dict[str, list[float]] = {name: [] for name in rows}
    cpu_rates: dict[str, list[float]] = {name: [] for name in rows}
    enabled_before = native._ENABLED  # the loader rows switch it
    for _ in range(args.rounds):
        for name, fn in rows.items():
            rate, cpu_rate = fn() if getattr(fn, "loader", False) else run_threads(fn, datas, args.threads)
            results[name].append(rate)
            cpu_rates[name].append(cpu_rate)
    native._ENABLED = enabled_before

    first = next(iter(results.values()))
    simd = native._crop._simd() if native.available() else "-"
    print(f"{len(datas)} JPEGs, {args.threads} threads, {args.rounds} rounds, native kernels: {simd}")
    print(f"{'path':42s} {'images/s':>9s} {'min..max':>13s} {'vs a':>6s} {'img/CPU-s':>10s} {'vs a':>6s}")
    first_cpu = next(iter(cpu_rates.values()))
    for name, rates in results.items():
        # the ratio of each round (same machine load), then the median of those
        ratio = statistics.median(r / a for r, a in zip(rates, first))
        cpu = cpu_rates[name]
        cpu_ratio = statistics.median(r / a for r, a in zip(cpu, first_cpu))
        print(f"{name:42s} {statistics.median(rates):9.0f} {min(rates):6.0f}..{max(rates):<6.0f} {ratio:6.2f} "
              f"{statistics.median(cpu):10.0f} {cpu_ratio:6.2f}")

def loader_rows(args: argparse.Namespace) -> dict:
    """DataLoader epochs (batch 64, imagenet_train(224), uint8) with the native path off/on."""
    import turbofeed

    def make(enabled: bool):
        def epoch() -> float:
            native._ENABLED = enabled and native._crop is not None
            loader = turbofeed.DataLoader(args.data, batch_size=64, num_workers=args.threads, shuffle=True,
                                          transform=imagenet_train(224), drop_last=False)
            count, started, cpu = 0, time.perf_counter(), time.process_time()
            for images, _ in loader:
                count += len(images)
            return count / (time.perf_counter() - started), count / (time.process_time() - cpu)
        epoch.loader = True
        return epoch

    rows = {"d  DataLoader, Python path": make(False)}
    if native.available():
        rows["d  DataLoader, native"] = make(True)
    return rows


if __name__ == "__main__":
    main()
