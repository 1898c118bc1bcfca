"""Where the GPU loader's time goes, on a GPU machine: the profile behind bench/gpu_check.py's
loader rows (docs/gpu.md). Each step prints one JSON line and goes into OUT/gpu_profile.json;
the caller's-thread profile (cProfile) goes into OUT/gpu_profile.txt.

  loader      the GPU loader (train, uint8), images/s, loader.stats.seconds, and a cProfile of
              the caller's thread, which decodes and resizes each batch
  no-nvjpeg   the same loader with a decoder that only allocates each image's tensor: the rate
              the feeding threads and the batched resize allow without nvJPEG
  parts       one batch's parts alone, device synchronised: nvJPEG decode, resize_batch, and
              the worker side (header + scan check) per image on 1 and 16 threads
  threads     the GPU loader with 2, 4, 8, 16 feeding threads, and 16 with a shorter GIL
              switch interval (is the caller's thread starved of the GIL?)
  memory      allocated/reserved device memory after each of 6 epochs, and the live CUDA
              tensors (shape: count) that stay from one epoch to the next
  feed        bench/gpu_feed_cost.py on this host's CPU: the Python per sample that holds
              the GIL (feeding task, caller's thread per image, GpuDecoder's preparation)

Usage: python bench/gpu_profile.py --data DIR --out OUT [--steps loader,no-nvjpeg,parts,threads,memory,feed]
Without CUDA every step runs on the CPU with the stand-in decoder (a dry run of the script).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import glob
import io
import json
import os
import pstats
import sys
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

import turbofeed
from turbofeed import transforms as T

from gpu_check import read_jpegs  # bench/, beside this script

BATCH = 256
SIZE = 224
WORKERS = min(16, os.cpu_count() or 16)
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def real_decoder() -> Any:
    if not CUDA:
        from turbofeed.testing import CpuStandInDecoder
        return CpuStandInDecoder()
    from turbofeed.decode.gpu import GpuDecoder
    return GpuDecoder("cuda")


class AllocOnly:
    """A decoder that allocates each image's (3, H, W) tensor from its header and decodes
    nothing: the loader then runs at the rate of everything but nvJPEG."""

    def __init__(self) -> None:
        self.device = torch.device("cuda", torch.cuda.current_device()) if CUDA else torch.device("cpu")

    def decode(self, datas: list[bytes]) -> list[torch.Tensor | None]:
        from turbofeed.decode import probe

        out: list[torch.Tensor | None] = []
        for d in datas:
            info = probe(d)
            out.append(torch.empty((3, info.height, info.width), dtype=torch.uint8, device=self.device))
        return out


def run_loader(shards: list[str], seconds: float, profile: cProfile.Profile | None = None,
               **kwargs: Any) -> dict:
    kwargs.setdefault("num_workers", WORKERS)
    loader = turbofeed.DataLoader(shards, batch_size=BATCH, shuffle=True, drop_last=True,
                                  transform=T.imagenet_train(SIZE), device=DEVICE if CUDA else None, **kwargs)
    try:
        images, started, first = 0, 0.0, True
        while True:
            for x, _ in loader:
                if first:
                    sync()
                    before = dict(loader.stats.seconds)
                    started, first = time.perf_counter(), False
                    if profile is not None:
                        profile.enable()
                    continue
                images += len(x)
                if time.perf_counter() - started >= seconds:
                    sync()
                    elapsed = time.perf_counter() - started
                    if profile is not None:
                        profile.disable()
                    spent = {k: round(v - before.get(k, 0.0), 3) for k, v in loader.stats.seconds.items()}
                    return {"images_per_s": round(images / elapsed), "seconds": round(elapsed, 2),
                            "stage_seconds": spent, "errors": dict(loader.stats.errors)}
    finally:
        loader.close()


def step_loader(shards: list[str], out_dir: str) -> dict:
    profile = cProfile.Profile()
    result = run_loader(shards, 5.0 if CUDA else 1.0, profile, gpu_decode=real_decoder())
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    with open(os.path.join(out_dir, "gpu_profile.txt"), "w") as f:
        f.write(text.getvalue())
    return result


def step_no_nvjpeg(shards: list[str], out_dir: str) -> dict:
    return run_loader(shards, 5.0 if CUDA else 1.0, gpu_decode=AllocOnly())


def step_threads(shards: list[str], out_dir: str) -> dict:
    """The GPU loader with 2, 4, 8 and 16 feeding threads (every scan already checked), and
    16 with a 0.5 ms GIL switch interval: is the caller's thread starved of the GIL?"""
    out: dict[str, Any] = {}
    seconds = 4.0 if CUDA else 1.0
    for workers in (2, 4, 8, 16):
        out[str(workers)] = run_loader(shards, seconds, gpu_decode=real_decoder(), num_workers=workers)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        out["16-switch-0.5ms"] = run_loader(shards, seconds, gpu_decode=real_decoder(), num_workers=16)
    finally:
        sys.setswitchinterval(interval)
    return out


def timed(fn: Any, repeat: int) -> float:
    fn()
    sync()
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync()
    return (time.perf_counter() - started) / repeat


def step_parts(shards: list[str], out_dir: str) -> dict:
    import random

    from turbofeed.decode import probe, scan
    from turbofeed.decode.gpu import encoded_tensors
    from turbofeed.engine.gpu import resize_batch
    from turbofeed.transforms import Window

    datas = read_jpegs(shards, BATCH)
    decoder = real_decoder()
    out: dict[str, Any] = {"decode_ms": 1e3 * timed(lambda: decoder.decode(datas), 10)}
    images = decoder.decode(datas)
    rng = random.Random(0)
    windows = []
    for image in images:
        h, w = int(image.shape[1]), int(image.shape[2])
        ch, cw = rng.randint(h // 3, h), rng.randint(w // 3, w)
        y, x = rng.randint(0, h - ch), rng.randint(0, w - cw)
        windows.append(Window((x, y, x + cw, y + ch), SIZE, SIZE, rng.random() < 0.5))
    out["resize_uint8_ms"] = 1e3 * timed(lambda: resize_batch(images, windows, (SIZE, SIZE), None), 10)
    spec = T.imagenet_train(SIZE, normalize=True).output
    out["resize_float_ms"] = 1e3 * timed(lambda: resize_batch(images, windows, (SIZE, SIZE), spec), 10)
    out["frombuffer_ms"] = 1e3 * timed(lambda: [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas], 10)
    out["byte_tensors_ms"] = 1e3 * timed(lambda: encoded_tensors(datas), 10)  # what GpuDecoder does now

    def worker_side(d: bytes) -> None:
        probe(d)
        scan.check(d)

    started = time.perf_counter()
    for d in datas:
        worker_side(d)
    out["worker_side_us_per_image_1_thread"] = 1e6 * (time.perf_counter() - started) / len(datas)
    with ThreadPoolExecutor(WORKERS) as pool:
        started = time.perf_counter()
        for _ in range(4):
            list(pool.map(worker_side, datas))
        out[f"worker_side_images_per_s_{WORKERS}_threads"] = 4 * len(datas) / (time.perf_counter() - started)
    return {k: round(v, 2) for k, v in out.items()}


def live_cuda_tensors() -> Counter:
    gc.collect()
    found: Counter = Counter()
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and obj.device.type == DEVICE:
                found[f"{tuple(obj.shape)} {obj.dtype}"] += 1
        except Exception:
            pass
    return found


def step_memory(shards: list[str], out_dir: str) -> dict:
    if CUDA:
        torch.cuda.empty_cache()
    loader = turbofeed.DataLoader(shards[:4], batch_size=BATCH, num_workers=WORKERS, shuffle=True,
                                  transform=T.imagenet_train(SIZE), gpu_decode=real_decoder(),
                                  device=DEVICE if CUDA else None)
    epochs = []
    previous: Counter = Counter()
    try:
        for _ in range(6):
            for _ in loader:
                pass
            sync()
            live = live_cuda_tensors()
            epochs.append({"allocated_mib": round(torch.cuda.memory_allocated() / 2**20, 1) if CUDA else 0,
                           "reserved_mib": round(torch.cuda.memory_reserved() / 2**20, 1) if CUDA else 0,
                           "live_tensors": sum(live.values()),
                           "new_since_last": dict((live - previous).most_common(6))})
            previous = live
    finally:
        loader.close()
    gc.collect()
    after_close = round(torch.cuda.memory_allocated() / 2**20, 1) if CUDA else 0
    return {"epochs": epochs, "allocated_mib_after_close": after_close}


def step_feed(shards: list[str], out_dir: str) -> dict:
    """bench/gpu_feed_cost.py in a process of its own (it wraps the stage's methods to time
    them): this host's CPU figures, beside the 2-core CPU machine's in bench/RESULTS.md."""
    import subprocess

    data = os.path.dirname(shards[0])
    done = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_feed_cost.py"),
                           "--data", data, "--shards", "4", "--repeats", "3",
                           "--batch-size", str(BATCH if CUDA else 8)],
                          capture_output=True, text=True, timeout=90)
    if done.returncode:
        raise RuntimeError(f"gpu_feed_cost.py exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


STEPS = {"loader": step_loader, "no-nvjpeg": step_no_nvjpeg, "parts": step_parts, "memory": step_memory,
         "threads": step_threads, "feed": step_feed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", default=",".join(STEPS))
    args = parser.parse_args()
    shards = sorted(glob.glob(os.path.join(args.data, "*.tar")))
    os.makedirs(args.out, exist_ok=True)
    results: dict[str, Any] = {}
    failed = False
    for name in args.steps.split(","):
        started = time.perf_counter()
        try:
            results[name] = STEPS[name](shards, args.out)
        except Exception:
            results[name] = {"failed": traceback.format_exc()}
            failed = True
        print(f"gpu_profile.py: {name} ({time.perf_counter() - started:.1f} s): {json.dumps(results[name])}",
              flush=True)
        with open(os.path.join(args.out, "gpu_profile.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
