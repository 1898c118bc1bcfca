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
            images, a 2 px output: next to no arithmetic, so what is left is Python and
            torch's per-op dispatch, what a GPU's queued kernels cost the host); the
            stand-in decoder's own time is subtracted
  prepare   turbofeed's ``GpuDecoder`` per image before nvJPEG, batch 256: on the
            per-chunk path ``decode_tensors``' own Python (the headers were read natively,
            the byte tensors are views of the chunks' buffers); on the per-sample path which
            images are sent (``sendable``: JPEG, not CMYK/YCCK, under the pixel limit) and
            the CPU byte tensors torchvision's ``decode_jpeg`` takes (with the part copied
            without the GIL)

All in one thread (``num_workers=0``: the feeding work runs in the caller's thread, so
the timers are exact; they read the thread's CPU time, so time spent preempted on a busy
machine does not count); each figure is the best of ``--repeats`` epochs, in us.
``feed_thread_cpu_us_per_sample`` runs the feeding work on one thread instead: its CPU
time per sample, reads included, with the executor's queue that the one-thread run skips.
``gil_us_per_sample`` adds up what holds the GIL: feed without the reads (and the
native calls that release the GIL, where the feed makes them), caller, prepare without
the copy made without the GIL. ``caller_thread_cpu_us_per_sample`` is the whole loop's
thread CPU time, reads and all, less the stand-in decoder's, and
``loop_gil_us_per_sample`` the same sum with it in place of feed and caller: it also
counts the per-batch work around them (submitting tasks, the delivery), as the CPU
path's figure does (bench/emulated_cores.py reports this one). This is not a GPU measurement: it is the
GIL time per sample that caps the GPU loader's rate (about 40-50 us on the H100 host).

``--path cpu`` measures the CPU path the same way (issue 35): the train preset at 224 px
into batch slots, ``num_workers=0``, each image's decode replaced by a wait without the
GIL (:func:`emulated_decode`, as bench/emulated_cores.py does; a wait costs no thread
CPU time), so the caller's thread CPU time per sample, less the native calls that run
without the GIL (the chunk's reads, the waits), is the Python that holds the GIL: the
plan, the index, the crop windows, the policy, the slot, the delivery. On either path,
by default the per-chunk work where the loader takes it; ``--per-sample`` forces the
per-sample path (what every image took before issue 35).

    python bench/gpu_feed_cost.py [--per-sample] [--data DIR] [--shards 2] [--repeats 5] [--profile OUT.txt]
    python bench/gpu_feed_cost.py --path cpu [--per-sample] [--wait-ms 1.5] [--data DIR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import glob
import inspect
import io
import json
import os
import pstats
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import native, scan
from turbofeed.engine import choose, decode_gpu, stream

HERE = os.path.dirname(os.path.abspath(__file__))
# CPU time of the calling thread: time the thread spends preempted (these machines are
# shared) does not count, and everything timed runs in the one thread (a read's kernel
# copy counts: it is CPU work of this thread). Each reading is a system call, about
# 0.5 us, four per sample, the same before and after a change.
clock = time.thread_time
DEFAULT_DATA = os.path.join(HERE, ".data", "imagenet_like")
#: px: the GPU path's output here. Its crop, resize and normalise are a GPU's arithmetic,
#: queued by the host; on the CPU they are done, and even at 16 px a batch's 768 small
#: matrix products cost about 10 us an image here (2026-11-28), more than the host's
#: share of the same ops on a GPU. At 2 px, 3 us.
GPU_OUTPUT = 2


class TinyDecoder:
    """The decoder contract with no decoding: each image an (3, 8, 8) uint8 CPU tensor, so
    the caller's torch ops (crop, pad, resize to a ``GPU_OUTPUT`` px output) do next to no arithmetic
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

    def decode_tensors(self, tensors: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """As turbofeed's GpuDecoder takes the per-chunk path's packed bytes."""
        return self.decode(tensors)  # type: ignore[arg-type]


@contextlib.contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` is ``value`` inside the block, what it was after it."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def timed(function: Callable[..., Any], add: Callable[[float], None]) -> Callable[..., Any]:
    """``function`` with the thread CPU seconds of each call given to ``add``."""
    @functools.wraps(function)  # its signature stays visible (:func:`emulating`)
    def call(*args: Any, **kwargs: Any) -> Any:
        started = clock()
        try:
            return function(*args, **kwargs)
        finally:
            add(clock() - started)
    return call


class Seconds:
    """A running total of seconds, for :func:`timed`."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def add(self, seconds: float) -> None:
        self.seconds += seconds


@contextlib.contextmanager
def pread_timer() -> Iterator[Seconds]:
    """Seconds in ``os.pread`` (the read itself runs without the GIL), inside the block."""
    total = Seconds()
    with patched(os, "pread", timed(os.pread, total.add)):
        yield total


class Timers:
    """Seconds in the worker threads' tasks (``_Runner.run`` per sample: the bad-sample
    policy's bookkeeping around ``GpuDecode.fill``; ``_Runner.run_chunk`` per chunk, with
    the positions it leaves to ``run`` counted once) and in ``GpuDecode.finish`` (wrapped
    at class level inside :meth:`installed`; one thread: ``num_workers=0``)."""

    def __init__(self) -> None:
        self.fill = 0.0
        self.finish = 0.0
        self.depth = 0  # tasks running in this thread: only the outermost one counts

    def task(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self.depth += 1
            started = clock()
            try:
                return function(*args)
            finally:
                self.depth -= 1
                if not self.depth:
                    self.fill += clock() - started
        return call

    def add_finish(self, seconds: float) -> None:
        self.finish += seconds

    @contextlib.contextmanager
    def installed(self) -> Iterator["Timers"]:
        runner = stream._Runner
        with patched(runner, "run", self.task(runner.run)), patched(runner, "run_chunk", self.task(runner.run_chunk)), \
                patched(decode_gpu.GpuDecode, "finish", timed(decode_gpu.GpuDecode.finish, self.add_finish)):
            yield self


def emulating() -> list[str]:
    """The names of ``turbofeed.decode.native``'s functions that take ``emulate_s`` (a
    chunk's native calls, each decode replaced by a wait)."""
    return [name for name, f in vars(native).items()
            if inspect.isfunction(f) and "emulate_s" in inspect.signature(f).parameters]


@contextlib.contextmanager
def emulated_decode(wait_s: float) -> Iterator[None]:
    """Inside the block every CPU decode of an image is a wait of ``wait_s`` seconds that
    holds no GIL, everything around it unchanged: each of :func:`emulating` with
    ``emulate_s`` (the C code waits in place of each decode: the per-chunk path), and
    ``native.crop_resize`` (the per-sample path) by ``time.sleep``. No pixel is written."""
    names = emulating()
    if not names:
        raise RuntimeError("turbofeed.decode.native has no function taking emulate_s: the per-chunk path "
                           "cannot be emulated")

    def forced(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **{**kwargs, "emulate_s": wait_s})
        return call

    def per_sample(*args: Any, **kwargs: Any) -> None:
        time.sleep(wait_s)

    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(patched(native, name, forced(getattr(native, name))))
        stack.enter_context(patched(native, "crop_resize", per_sample))
        yield


@contextlib.contextmanager
def per_sample_path(on: bool = True) -> Iterator[None]:
    """With ``on``, passes started inside the block run per sample, not per chunk (the
    CPU decode and the GPU path's feeding threads): as every sample ran before issue 35,
    and as it still does for the options the chunks do not take."""
    if not on:
        yield
        return
    with patched(choose, "chunked", lambda *args, **kwargs: False):
        yield


@contextlib.contextmanager
def gil_free_timer() -> Iterator[Seconds]:
    """Thread CPU seconds in the native calls that release the GIL (a chunk's reads and
    native calls, the decodes or their waits; the per-sample scan check of a sample seen
    the first time), inside it. The extension's functions themselves are timed, not
    their Python wrappers in ``turbofeed.decode.native``, whose argument handling holds
    the GIL and so counts as Python."""
    total = Seconds()
    with contextlib.ExitStack() as stack:
        for name in GIL_FREE:
            if hasattr(native._crop, name):
                stack.enter_context(patched(native._crop, name, timed(getattr(native._crop, name), total.add)))
        yield total


#: The extension's functions that release the GIL for their work (csrc/module*.c).
GIL_FREE = ("read_chunk", "read_chunk_at", "run_chunk", "run_chunk_at", "crop_resize", "resize", "check", "windows")


def timed_epoch(loader: Any, profile: cProfile.Profile | None = None) -> tuple[int, float]:
    """One epoch of ``loader``: (images, this thread's CPU seconds), under ``profile`` if given."""
    images = 0
    if profile is not None:
        profile.enable()
    started = clock()
    for x, _ in loader:
        images += len(x)
    total = clock() - started
    if profile is not None:
        profile.disable()
    return images, total


def epochs(loader: Any, decoder: TinyDecoder, timers: Timers, reads: Seconds, native_s: Seconds, count: int,
           profile: cProfile.Profile | None = None) -> list[dict[str, float]]:
    out = []
    for _ in range(count):
        timers.fill = timers.finish = decoder.seconds = reads.seconds = native_s.seconds = 0.0
        images, total = timed_epoch(loader, profile)
        out.append({"feed_us": 1e6 * timers.fill / images, "pread_us": 1e6 * reads.seconds / images,
                    "native_us": 1e6 * native_s.seconds / images,
                    "caller_us": 1e6 * (timers.finish - decoder.seconds) / images,
                    "loop_us": 1e6 * (total - decoder.seconds) / images, "images": images})
    return out


def prepare_cost(shards: list[str], limit: int, repeats: int, *, per_sample: bool = False) -> dict[str, float]:
    """turbofeed's GpuDecoder's Python per image before nvJPEG (no GPU needed for it), and
    the part of it that copies bytes without holding the GIL. The per-chunk path hands it
    byte tensors whose headers were read natively (``decode_tensors``): measured with
    torchvision's ``decode_jpeg`` replaced by a function that returns at once (there is
    no CUDA here); the per-sample path (``per_sample``, or a tree without
    ``decode_tensors``) checks each header (``sendable``) and joins the bytes into tensors."""
    import tarfile
    import types

    import numpy as np

    from turbofeed.decode import gpu
    from turbofeed.decode.gpu_failures import DecoderFailures

    datas: list[bytes] = []
    with tarfile.open(shards[0]) as tar:
        for m in tar.getmembers():
            if m.name.endswith(".jpg") and len(datas) < limit:
                datas.append(tar.extractfile(m).read())  # type: ignore[union-attr]
    times: dict[str, list[float]] = {"sendable": [], "byte_tensors": [], "copy_without_gil": []}
    if not per_sample and hasattr(gpu.GpuDecoder, "decode_tensors"):
        decoder = gpu.GpuDecoder.__new__(gpu.GpuDecoder)  # no CUDA here: the Python around nvJPEG only
        decoder.backend, decoder.device = "torchvision", torch.device("cpu")
        decoder.failures = DecoderFailures()  # what __init__ sets, without a device
        fake = types.ModuleType("torchvision.io")
        fake.ImageReadMode = types.SimpleNamespace(RGB=None)  # type: ignore[attr-defined]
        fake.decode_jpeg = lambda part, **kw: part  # type: ignore[attr-defined]
        tensors = list(torch.from_numpy(np.frombuffer(b"".join(datas), np.uint8).copy()).split(
            [len(d) for d in datas]))
        with patched(sys, "modules", {**sys.modules, "torchvision": types.ModuleType("torchvision"),
                                      "torchvision.io": fake}):
            for _ in range(repeats):
                times["sendable"].append(0.0)  # headers read by the chunk's native call
                started = clock()
                decoder.decode_tensors(tensors)
                times["byte_tensors"].append(clock() - started)
                times["copy_without_gil"].append(0.0)  # none: the chunks' buffers are the tensors
        return {f"{k}_us": 1e6 * min(v) / len(datas) for k, v in times.items()}
    encode = getattr(gpu, "encoded_tensors", None)
    # the batch is one join: CPython copies it without the GIL when it is 1 MiB or more of bytes
    joined = encode is not None and sum(map(len, datas)) >= 1 << 20
    if encode is None:  # before the change: what _decode_torchvision did per image, all under the GIL
        def encode(ds: list[bytes]) -> Any:
            return [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in ds]
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
                                  transform=T.imagenet_train(GPU_OUTPUT), gpu_decode=decoder)
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


def gpu_costs(shards: list[str], batch_size: int, repeats: int, *, per_sample: bool = False,
              profile: str | None = None, threaded: bool = True) -> dict[str, Any]:
    """The GPU loader's figures (the module docstring), ``gil_us_per_sample`` among them;
    ``per_sample``: :func:`per_sample_path`; ``profile``: write a cProfile of one more
    epoch there; ``threaded``: also ``feed_thread_cpu_us_per_sample`` (one more loader)."""
    decoder = TinyDecoder()
    loader = turbofeed.DataLoader(shards, batch_size=batch_size, num_workers=0, shuffle=True, drop_last=True,
                                  transform=T.imagenet_train(GPU_OUTPUT), gpu_decode=decoder)
    try:  # each pass chooses its decode stage when it starts: the patches hold for the passes
        with per_sample_path(per_sample), Timers().installed() as timers, pread_timer() as reads, \
                gil_free_timer() as native_s:
            first = epochs(loader, decoder, timers, reads, native_s, 1)[0]  # every scan checked once
            later = epochs(loader, decoder, timers, reads, native_s, repeats)
            if profile:
                write_profile(profile, lambda p: epochs(loader, decoder, timers, reads, native_s, 1, p))
        errors = dict(loader.stats.errors)
    finally:
        loader.close()

    def best(key: str) -> float:
        return round(min(e[key] for e in later), 1)

    result: dict[str, Any] = {
        "images_per_epoch": later[0]["images"],
        "feed_us_per_sample": best("feed_us"),
        "of_which_pread_us": best("pread_us"),
        "of_which_gil_free_native_us": best("native_us"),
        "caller_us_per_image": best("caller_us"),
        "caller_thread_cpu_us_per_sample": best("loop_us"),
        "first_epoch_feed_us_per_sample": round(first["feed_us"], 1),
    }
    if threaded:
        with per_sample_path(per_sample):
            result["feed_thread_cpu_us_per_sample"] = feed_thread_cpu(shards, batch_size, repeats)
    result.update({k: round(v, 1) for k, v in prepare_cost(shards, batch_size, repeats,
                                                            per_sample=per_sample).items()})
    result["errors"] = errors
    # what holds the GIL: all of it but the reads (and native calls without the GIL) and the joined copy
    result["gil_us_per_sample"] = round(result["feed_us_per_sample"] - result["of_which_pread_us"]
                                        - result["of_which_gil_free_native_us"] + result["caller_us_per_image"] + result["sendable_us"]
                                        + result["byte_tensors_us"] - result["copy_without_gil_us"], 1)
    result["loop_gil_us_per_sample"] = round(result["caller_thread_cpu_us_per_sample"] - result["of_which_pread_us"]
                                             - result["of_which_gil_free_native_us"] + result["sendable_us"]
                                             + result["byte_tensors_us"] - result["copy_without_gil_us"], 1)
    return result


def cpu_costs(shards: list[str], batch_size: int, repeats: int, wait_s: float, *, per_sample: bool = False,
              profile: str | None = None) -> dict[str, Any]:
    """The CPU path's Python per sample (the module docstring): a train-preset loader with
    ``num_workers=0`` (all of it in this thread) and :func:`emulated_decode`; per epoch,
    this thread's CPU time less the GIL-free native calls and ``os.pread``; the best of
    ``repeats`` epochs after the first. ``per_sample``: :func:`per_sample_path`."""
    loader = turbofeed.DataLoader(shards, batch_size=batch_size, num_workers=0, shuffle=True, drop_last=True,
                                  transform=T.imagenet_train(224))
    runs = []
    try:  # each pass chooses its decode stage when it starts: the patches hold for the passes
        with per_sample_path(per_sample), emulated_decode(wait_s), gil_free_timer() as native_s, \
                pread_timer() as reads:
            for _ in range(1 + repeats):
                runs.append(cpu_epoch(loader, native_s, reads))
            if profile:
                write_profile(profile, lambda p: cpu_epoch(loader, native_s, reads, p))
        errors = dict(loader.stats.errors)
    finally:
        loader.close()
    later = runs[1:]

    def best(key: str) -> float:
        return round(min(r[key] for r in later), 1)

    return {"images_per_epoch": later[0]["images"], "path": "per sample" if per_sample else "per chunk",
            "thread_cpu_us_per_sample": best("thread_us"), "of_which_gil_free_native_us": best("native_us"),
            "of_which_pread_us": best("pread_us"), "first_epoch_gil_us_per_sample": round(runs[0]["gil_us"], 1),
            "errors": errors, "gil_us_per_sample": best("gil_us")}


def cpu_epoch(loader: Any, native_s: Seconds, reads: Seconds,
              profile: cProfile.Profile | None = None) -> dict[str, float]:
    """One epoch of :func:`cpu_costs`' loader: this thread's CPU us per sample, in all, in
    GIL-free native calls, in ``os.pread``, and what is left (holding the GIL)."""
    native_s.seconds = reads.seconds = 0.0
    images, total = timed_epoch(loader, profile)
    out = {"images": images, "thread_us": 1e6 * total / images, "native_us": 1e6 * native_s.seconds / images,
           "pread_us": 1e6 * reads.seconds / images}
    out["gil_us"] = out["thread_us"] - out["native_us"] - out["pread_us"]
    return out


def write_profile(path: str, run: Callable[[cProfile.Profile], Any]) -> None:
    """``run(profile)``, then the profile's top functions by own and by cumulative time to ``path``."""
    profile = cProfile.Profile()
    run(profile)
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(60)
    with open(path, "w") as f:
        f.write(text.getvalue())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", choices=["gpu", "cpu"], default="gpu", help="the loader path measured")
    parser.add_argument("--per-sample", action="store_true", help="force the per-sample path")
    parser.add_argument("--wait-ms", type=float, default=1.5,
                        help="--path cpu: each image's emulated decode, ms (a wait costs no CPU time)")
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
    if args.path == "cpu":
        result = cpu_costs(shards, args.batch_size, args.repeats, args.wait_ms / 1e3, per_sample=args.per_sample,
                           profile=args.profile)
    else:
        result = gpu_costs(shards, args.batch_size, args.repeats, per_sample=args.per_sample, profile=args.profile)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
