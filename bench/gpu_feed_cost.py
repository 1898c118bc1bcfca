#!/usr/bin/env python3
"""Python per sample on the GPU loader's path, measured on the CPU (no GPU needed).

On an H100 the GPU loader was GIL-bound (bench/RESULTS.md, "GPU profile"): the caller's
thread, which runs nvJPEG and the batched resize, waits for the GIL the feeding threads'
per-sample Python holds. This script measures that Python, the part of the GPU loader's
cost the CPU can show, with everything else taken away:

  feed      the feeding threads' task per sample (``GpuDecode.fill`` and the policy's
            bookkeeping around it: read the bytes, header, crop window, slot), in a later
            epoch (every scan already checked, as in steady state; the first epoch's scan
            check is native work); ``os.pread`` is timed apart (it releases the GIL)
  caller    the caller's thread per image (``GpuDecode.finish``: the decoder call, CPU
            fallback bookkeeping, crops to the window's reach, padding, the window tables,
            the resize's torch calls, labels) with a decoder that decodes nothing (8x8
            images, a 16 px output: next to no arithmetic, so what is left is Python and
            torch's per-op dispatch, what a GPU's queued kernels cost the host); the
            stand-in decoder's own time is subtracted
  prepare   turbofeed's ``GpuDecoder`` per image before nvJPEG, batch 256: which images
            are sent (``sendable``: JPEG, not CMYK/YCCK, under the pixel limit) and the CPU
            byte tensors torchvision's ``decode_jpeg`` takes (with the part copied without
            the GIL)

All in one thread (``num_workers=0``: the feeding work runs in the caller's thread, so
the timers are exact; they read the thread's CPU time, so time spent preempted on a busy
machine does not count); each figure is the best of ``--repeats`` epochs, in us.
``feed_thread_cpu_us_per_sample`` runs the feeding work on one thread instead: its CPU
time per sample, reads included, with the executor's queue that the one-thread run skips.
``gil_us_per_sample`` adds up what holds the GIL: feed without the reads, caller,
prepare without the copy made without the GIL. This is not a GPU measurement: it is the
GIL time per sample that caps the GPU loader's rate (about 40-50 us on the H100 host).

    python bench/gpu_feed_cost.py [--data DIR] [--shards 2] [--repeats 5] [--profile OUT.txt]
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import io
import json
import os
import pstats
import sys
import time
from typing import Any

import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.engine import decode_gpu, stream

HERE = os.path.dirname(os.path.abspath(__file__))
# CPU time of the calling thread: time the thread spends preempted (these machines are
# shared) does not count, and everything timed runs in the one thread (a read's kernel
# copy counts: it is CPU work of this thread). Each reading is a system call, about
# 0.5 us, four per sample, the same before and after a change.
clock = time.thread_time
DEFAULT_DATA = os.path.join(HERE, ".data", "imagenet_like")


class TinyDecoder:
    """The decoder contract with no decoding: each image an (3, 8, 8) uint8 CPU tensor, so
    the caller's torch ops (crop, pad, resize to a 16 px output) do next to no arithmetic
    and what remains is their Python and dispatch, the part that holds the GIL while a
    GPU runs the kernels. Its own time is kept, to be subtracted."""

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.seconds = 0.0

    def decode(self, datas: list[bytes]) -> list[torch.Tensor | None]:
        started = clock()
        out: list[torch.Tensor | None] = [torch.zeros((3, 8, 8), dtype=torch.uint8) for _ in datas]
        self.seconds += clock() - started
        return out


class PreadTimer:
    """Seconds in ``os.pread`` (the read itself runs without the GIL), wrapped."""

    def __init__(self) -> None:
        self.seconds = 0.0
        pread = os.pread

        def timed(fd: int, n: int, offset: int) -> bytes:
            started = clock()
            try:
                return pread(fd, n, offset)
            finally:
                self.seconds += clock() - started

        os.pread = timed  # type: ignore[assignment]


class Timers:
    """Seconds in the worker threads' task per sample (``_Runner.run``: the bad-sample
    policy's bookkeeping around ``GpuDecode.fill``) and in ``GpuDecode.finish`` (wrapped
    at class level)."""

    def __init__(self) -> None:
        self.fill = 0.0
        self.finish = 0.0
        fill, finish = stream._Runner.run, decode_gpu.GpuDecode.finish

        def timed_fill(runner: Any, *args: Any) -> None:
            started = clock()
            try:
                fill(runner, *args)
            finally:
                self.fill += clock() - started

        def timed_finish(stage: Any, job: Any) -> Any:
            started = clock()
            try:
                return finish(stage, job)
            finally:
                self.finish += clock() - started

        stream._Runner.run = timed_fill  # type: ignore[method-assign]
        decode_gpu.GpuDecode.finish = timed_finish  # type: ignore[method-assign]


def epochs(loader: Any, decoder: TinyDecoder, timers: Timers, reads: PreadTimer, count: int,
           profile: cProfile.Profile | None = None) -> list[dict[str, float]]:
    out = []
    for _ in range(count):
        timers.fill = timers.finish = decoder.seconds = reads.seconds = 0.0
        images = 0
        if profile is not None:
            profile.enable()
        for x, _ in loader:
            images += len(x)
        if profile is not None:
            profile.disable()
        out.append({"feed_us": 1e6 * timers.fill / images, "pread_us": 1e6 * reads.seconds / images,
                    "caller_us": 1e6 * (timers.finish - decoder.seconds) / images, "images": images})
    return out


def prepare_cost(shards: list[str], limit: int, repeats: int) -> dict[str, float]:
    """turbofeed's GpuDecoder's Python per image before nvJPEG (no GPU needed for it), and
    the part of it that copies bytes without holding the GIL."""
    import tarfile

    from turbofeed.decode import gpu

    datas: list[bytes] = []
    with tarfile.open(shards[0]) as tar:
        for m in tar.getmembers():
            if m.name.endswith(".jpg") and len(datas) < limit:
                datas.append(tar.extractfile(m).read())  # type: ignore[union-attr]
    encode = getattr(gpu, "encoded_tensors", None)
    # the batch is one join: CPython copies it without the GIL when it is 1 MiB or more of bytes
    joined = encode is not None and sum(map(len, datas)) >= 1 << 20
    if encode is None:  # before the change: what _decode_torchvision did per image, all under the GIL
        def encode(ds: list[bytes]) -> Any:
            return [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in ds]
    times: dict[str, list[float]] = {"sendable": [], "byte_tensors": [], "copy_without_gil": []}
    for _ in range(repeats):
        started = clock()
        [i for i, d in enumerate(datas) if gpu.sendable(d, 0)]
        times["sendable"].append(clock() - started)
        started = clock()
        encode(datas)
        times["byte_tensors"].append(clock() - started)
        started = clock()
        if joined:
            bytearray().join(datas)
        times["copy_without_gil"].append(clock() - started if joined else 0.0)
    return {f"{k}_us": 1e6 * min(v) / len(datas) for k, v in times.items()}


def feed_thread_cpu(shards: list[str], batch_size: int, repeats: int) -> float:
    """The same loader with one feeding thread: CPU seconds per sample of everything but
    the caller's thread (the feeding thread's task with the executor's queue, which the
    one-thread run leaves out; the reads' kernel time included: CPU time, unlike the
    wall time of a read, does not grow when the machine is busy); the best of
    ``repeats`` epochs."""
    decoder = TinyDecoder()
    loader = turbofeed.DataLoader(shards, batch_size=batch_size, num_workers=1, shuffle=True, drop_last=True,
                                  transform=T.imagenet_train(16), gpu_decode=decoder)
    out = []
    try:
        for _ in loader:  # warm: scans checked, threads started
            pass
        for _ in range(repeats):
            images = 0
            process, caller = time.process_time(), time.thread_time()
            for x, _ in loader:
                images += len(x)
            others = (time.process_time() - process) - (time.thread_time() - caller)
            out.append(1e6 * others / images)
    finally:
        loader.close()
    return round(min(out), 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", help="write a cProfile of one more epoch here")
    args = parser.parse_args()
    # The tiny tensors' arithmetic on one thread: torch's intra-op threads would spin in
    # the caller's thread, waiting for each other on a busy machine (on a GPU that
    # arithmetic is the device's).
    torch.set_num_threads(1)
    shards = sorted(glob.glob(os.path.join(args.data, "*.tar")))[:args.shards]
    if not shards:
        print(f"gpu_feed_cost.py: no .tar shards in {args.data} (bench/make_imagenet_like data)", file=sys.stderr)
        return 2
    decoder = TinyDecoder()
    timers = Timers()
    reads = PreadTimer()
    loader = turbofeed.DataLoader(shards, batch_size=args.batch_size, num_workers=0, shuffle=True, drop_last=True,
                                  transform=T.imagenet_train(16), gpu_decode=decoder)
    try:
        first = epochs(loader, decoder, timers, reads, 1)[0]  # every scan checked once
        later = epochs(loader, decoder, timers, reads, args.repeats)
        if args.profile:
            profile = cProfile.Profile()
            epochs(loader, decoder, timers, reads, 1, profile)
            text = io.StringIO()
            stats = pstats.Stats(profile, stream=text)
            stats.sort_stats("tottime").print_stats(40)
            stats.sort_stats("cumulative").print_stats(60)
            with open(args.profile, "w") as f:
                f.write(text.getvalue())
        errors = dict(loader.stats.errors)
    finally:
        loader.close()
    threaded = feed_thread_cpu(shards, args.batch_size, args.repeats)

    def best(key: str) -> float:
        return round(min(e[key] for e in later), 1)

    result: dict[str, Any] = {
        "images_per_epoch": later[0]["images"],
        "feed_us_per_sample": best("feed_us"),
        "of_which_pread_us": best("pread_us"),
        "caller_us_per_image": best("caller_us"),
        "first_epoch_feed_us_per_sample": round(first["feed_us"], 1),
        "feed_thread_cpu_us_per_sample": threaded,
        **{k: round(v, 1) for k, v in prepare_cost(shards, args.batch_size, args.repeats).items()},
        "errors": errors,
    }
    # what holds the GIL: all of it but the reads and the joined copy
    result["gil_us_per_sample"] = round(result["feed_us_per_sample"] - result["of_which_pread_us"]
                                        + result["caller_us_per_image"] + result["sendable_us"]
                                        + result["byte_tensors_us"] - result["copy_without_gil_us"], 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
