#!/usr/bin/env python3
"""Many cores and a GPU, emulated on this 2-core machine (issue 35, item 5).

What caps turbofeed on a big machine is the Python that holds the GIL per sample: one
interpreter lock serialises it, so past a few thousand images/s more cores and a GPU add
nothing (on an H100 host: 0.57 of linear at 16 threads, the GPU loader at 0.19-0.25 of
batched nvJPEG). A 2-core machine hides this, because its two cores are busy decoding.
Here each image's decode is replaced by a wait of the same length that holds no GIL
(``gpu_feed_cost.emulated_decode``: every ``turbofeed.decode.native`` call that takes
``emulate_s``, the per-chunk path's, with it set; ``time.sleep`` in place of
``native.crop_resize`` on the per-sample path), and every other cost stays: reads,
index, crop windows, policy, slots, delivery.
A thread then costs the machine only its Python, so each thread acts as one more core,
and the GIL's ceiling shows as it would on 64 cores. The wait is, unless ``--wait-ms``
says otherwise, the median time of one native crop-window decode measured at the start
(200 of the images at train-preset windows, as a later epoch decodes them), printed.
Measured:

- the CPU path: train preset (RandomResizedCrop(224) + flip, uint8), batch 256, images/s
  with N = 1, 8, 16, 32, 64 threads; ratio = rate_N / (N x rate_1);
- the GPU feeding path: a stand-in GPU decoder that waits without the GIL for
  batch / 15000 s per call (batched nvJPEG's rate on the H100) and returns (3, 8, 8)
  uint8 tensors (the loader cuts each image to its window's reach and resizes the batch
  after the decoder, to a 2 px output here: on a GPU that arithmetic is the device's,
  on these 2 cores it would swamp what is measured); 16 feeding threads; ratio = images/s
  / 15000;
- a stand-in training step per batch, 60 ms without the GIL (time.sleep: the GPU's work)
  + 10 ms of pure Python holding it (the step's launch overhead), fed by the CPU path
  (16 threads) and by the GPU feeding path: the loop's rate / the step's rate alone;
- the Python holding the GIL per sample on both paths (``gil_us``), as
  bench/gpu_feed_cost.py measures it (``num_workers=0``: the caller's thread CPU time
  for an epoch, less the GIL-free native calls and reads; a wait costs no CPU time; on
  the GPU path ``loop_gil_us_per_sample``, with turbofeed's GpuDecoder's own Python
  before nvJPEG added).

Each figure is taken twice in the same run, one right after the other: "now" (per
chunk, where the loader takes it) and "before" (per sample, as every sample went before
issue 35: ``turbofeed.engine.choose.chunked`` patched to False, which turns the chunks
off on both the CPU path and the GPU feeding path).

A rate is the steady rate of a pass: batches after its first over the time from that
batch's arrival to the last one's (with the step: steps, first included, over the time
from the first batch's arrival to the last step's end). A pass's start, the pipeline
filling, happens once an epoch: long epochs hide it, short ones here would not. Each
rate is the best of ``--epochs`` passes after the first of each loader (threads and
caches warm); epochs are ``--epoch-size`` samples drawn from the shards (each sample
several times), a quarter of that with one thread.

    python bench/emulated_cores.py [--data bench/.data/in1k] [--json FILE] [--write-results]
    python bench/emulated_cores.py --quick      # smoke run, under a minute

Data: ImageNet-like shards (2000 images by default); to make them:
    bench/.venvs/data/bin/python /work/shared/bench/make_imagenet_like.py bench/.data/in1k \\
        --count 2000 --per-shard 1000
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import native

from _results import write_block  # bench/ is sys.path[0] when run as a script
from gpu_feed_cost import GPU_OUTPUT, cpu_costs, emulated_decode, gpu_costs, per_sample_path

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, ".data", "in1k")
MAKE_DATA = ("bench/.venvs/data/bin/python /work/shared/bench/make_imagenet_like.py bench/.data/in1k "
             "--count 2000 --per-shard 1000")
BATCH = 256
THREADS, QUICK_THREADS = (1, 8, 16, 32, 64), (1, 8, 16)
NVJPEG_PER_S = 15000  # batched nvJPEG on the H100 (bench/RESULTS.md, GPU block)
FEED_THREADS = 16
STEP_WAIT_S, STEP_PYTHON_S = 0.060, 0.010  # a ResNet-50 step on an H100; its Python
#: The per-sample path on the landed code (issue 35's table: 1000 images, best of 3 later epochs).
ISSUE_35 = {1: 579, 8: 4487, 16: 6520, 32: 7035, 64: 7149}
#: (name, per-sample path forced): "now" is the loader as it is, "before" the per-sample path.
PATHS = (("now", False), ("before", True))


# -- data and the wait ------------------------------------------------------------------

def find_shards(data: str) -> list[str]:
    shards = sorted(glob.glob(os.path.join(data, "*.tar")))
    if not shards:
        sys.exit(f"emulated_cores.py: no .tar shards in {data}; make them with\n    {MAKE_DATA}")
    return shards


def jpegs(shard: str, count: int) -> list[bytes]:
    """The first ``count`` JPEGs of a shard."""
    out: list[bytes] = []
    with tarfile.open(shard) as tar:
        for member in tar:
            if len(out) == count:
                break
            if member.name.endswith(".jpg"):
                out.append(tar.extractfile(member).read())  # type: ignore[union-attr]
    return out


def median_decode_s(shard: str, count: int = 200) -> float:
    """The median seconds of one native crop-window decode on this machine: ``count``
    images of ``shard``, each at a train-preset window (RandomResizedCrop(224) + flip),
    as a later epoch decodes it (its scan checked before); the faster of two tries each."""
    datas = jpegs(shard, count)
    sizes = np.array([native.header(data)[:2] for data in datas], dtype=np.int64)
    windows = T.imagenet_train(224).windows(sizes[:, 0], sizes[:, 1], 0, 0, np.arange(len(datas)))
    out = np.empty((3, 224, 224), np.uint8)
    times = []
    for data, box, flip in zip(datas, windows.boxes.tolist(), windows.flips.tolist()):
        tries = []
        for _ in range(2):
            started = time.perf_counter()
            native.crop_resize(data, box, out, flip=flip, check_scan=False)
            tries.append(time.perf_counter() - started)
        times.append(min(tries))
    return statistics.median(times)


# -- loaders and rates ------------------------------------------------------------------

class WaitingDecoder:
    """A stand-in for batched nvJPEG on the CPU: waits ``len(datas) / NVJPEG_PER_S``
    seconds without the GIL per call and returns (3, 8, 8) uint8 tensors (the loader
    cuts each to its window's reach afterwards; the same tensors every call)."""

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.images: list[torch.Tensor] = []

    def decode(self, datas: list[bytes]) -> list[torch.Tensor | None]:
        time.sleep(len(datas) / NVJPEG_PER_S)
        if len(self.images) < len(datas):
            self.images = list(torch.zeros((len(datas), 3, 8, 8), dtype=torch.uint8).unbind(0))
        return list(self.images[:len(datas)])

    def decode_tensors(self, tensors: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """As turbofeed's GpuDecoder takes the per-chunk path's packed bytes (no header parsed again)."""
        return self.decode(tensors)  # type: ignore[arg-type]


def cpu_loader(shards: list[str], threads: int, epoch_size: int) -> turbofeed.DataLoader:
    return turbofeed.DataLoader(turbofeed.mix([turbofeed.Dataset(shards)], epoch_size=epoch_size), batch_size=BATCH,
                                num_workers=threads, shuffle=True, drop_last=True, transform=T.imagenet_train(224))


def gpu_loader(shards: list[str], epoch_size: int) -> turbofeed.DataLoader:
    return turbofeed.DataLoader(turbofeed.mix([turbofeed.Dataset(shards)], epoch_size=epoch_size), batch_size=BATCH,
                                num_workers=FEED_THREADS, shuffle=True, drop_last=True,
                                transform=T.imagenet_train(GPU_OUTPUT),
                                gpu_decode=WaitingDecoder())


def steady(loader: turbofeed.DataLoader, epochs: int, per_batch: Callable[[], None] | None = None) -> float:
    """The best steady rate (batches/s after the first batch, the module docstring) of
    ``epochs`` passes after the first, calling ``per_batch`` after each batch;
    closes the loader."""
    best = 0.0
    try:
        for epoch in range(1 + epochs):
            batches = iter(loader)
            next(batches)
            started = time.perf_counter()
            count = 0
            if per_batch is not None:
                per_batch()  # the first batch's step is in the interval (the loop's rate)
                count = 1
            for _ in batches:
                count += 1
                if per_batch is not None:
                    per_batch()
            # with a step: steps per second; without: batches after the first, per second
            rate = count / (time.perf_counter() - started)
            if epoch:
                best = max(best, rate)
    finally:
        loader.close()
    return best


def training_step() -> None:
    """60 ms without the GIL (the GPU's work), then 10 ms of this thread's CPU time in
    pure Python, which holds the GIL (the step's Python: launches, optimizer, logging)."""
    time.sleep(STEP_WAIT_S)
    end = time.thread_time() + STEP_PYTHON_S
    x = 0
    while time.thread_time() < end:
        x += 1


def step_alone_rate(steps: int) -> float:
    """Steps per second of :func:`training_step` with nothing else running."""
    started = time.perf_counter()
    for _ in range(steps):
        training_step()
    return steps / (time.perf_counter() - started)


# -- one set of figures -----------------------------------------------------------------

@dataclass
class Run:
    """What one run measures on: the shards, the wait, the threads, the epochs."""

    shards: list[str]
    images: int  # in the shards
    wait_s: float
    wait_text: str  # the wait and where it came from
    threads: tuple[int, ...]
    epochs: int  # timed, after the first of each loader
    epoch_size: int
    quick: bool


def no_figures() -> dict[str, Any]:
    return {"cpu": {"images_per_s": {}, "ratio": {}}, "gpu_feed": {}, "step": {}, "gil_us": {}}


def both_paths() -> Iterator[tuple[str, bool]]:
    """Each of :data:`PATHS`, with loaders made and run inside the loop's body on that path."""
    for name, per_sample in PATHS:
        with per_sample_path(per_sample):
            yield name, per_sample


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cpu_scaling(figures: dict[str, Any], run: Run) -> None:
    for n in run.threads:
        # one thread: a quarter of the epoch (a pass's start is a small share of it there,
        # and the full one would take most of the run)
        size = run.epoch_size if n > 1 else max(4 * BATCH, run.epoch_size // 4)
        for name, _ in both_paths():
            rate = BATCH * steady(cpu_loader(run.shards, n, size), run.epochs)
            figures[name]["cpu"]["images_per_s"][str(n)] = round(rate)
            say(f"cpu {name:6} {n:2} threads: {rate:7.0f} images/s")
    for f in figures.values():
        rates = f["cpu"]["images_per_s"]
        f["cpu"]["ratio"] = {str(n): round(rates[str(n)] / (n * rates["1"]), 3) for n in run.threads if n > 1}


def gpu_feed(figures: dict[str, Any], run: Run) -> None:
    for name, _ in both_paths():
        rate = BATCH * steady(gpu_loader(run.shards, run.epoch_size), run.epochs)
        figures[name]["gpu_feed"] = {"images_per_s": round(rate), "ratio": round(rate / NVJPEG_PER_S, 3)}
        say(f"gpu feed {name:6}: {rate:7.0f} images/s")


def step(figures: dict[str, Any], run: Run) -> None:
    """The loop's rate over the step's alone, fed by each path. The step alone is timed
    before, between and after the loops and its best kept (like the loops' rates: on a
    shared machine the best is the one least disturbed)."""
    steps = 5 if run.quick else 10
    loops = {}
    alone = [step_alone_rate(steps)]
    for name, _ in both_paths():
        cpu = steady(cpu_loader(run.shards, FEED_THREADS, run.epoch_size), run.epochs, training_step)
        gpu = steady(gpu_loader(run.shards, run.epoch_size), run.epochs, training_step)
        loops[name] = cpu, gpu
        alone.append(step_alone_rate(steps))
    best = max(alone)
    say(f"step alone: {best:.2f} steps/s (tries: {', '.join(f'{a:.2f}' for a in alone)})")
    for name, (cpu, gpu) in loops.items():
        figures[name]["step"] = {"cpu_ratio": round(cpu / best, 3), "gpu_ratio": round(gpu / best, 3)}
        say(f"step {name:6}: {figures[name]['step']}")


def gil_us(figures: dict[str, Any], run: Run) -> None:
    """bench/gpu_feed_cost.py's figure on each path; quick: one shard, one timed epoch and
    a 0.1 ms wait (a wait costs no CPU time: the figure does not depend on it)."""
    repeats = 1 if run.quick else 3
    shards = run.shards[:1] if run.quick else run.shards
    wait_s = 1e-4 if run.quick else run.wait_s
    for name, per_sample in PATHS:
        cpu = cpu_costs(shards, BATCH, repeats, wait_s, per_sample=per_sample)
        gpu = gpu_costs(shards, BATCH, repeats, per_sample=per_sample, threaded=False)
        figures[name]["gil_us"] = {"cpu": cpu["gil_us_per_sample"], "gpu": gpu["loop_gil_us_per_sample"]}
        say(f"gil_us {name:6}: {figures[name]['gil_us']}")


def measure(run: Run) -> dict[str, Any]:
    """``{"now": figures, "before": figures}``, each figure taken on both paths in turn."""
    figures = {name: no_figures() for name, _ in PATHS}
    with emulated_decode(run.wait_s):
        cpu_scaling(figures, run)
        gpu_feed(figures, run)
        step(figures, run)
    gil_us(figures, run)
    return figures


# -- report -----------------------------------------------------------------------------

def table(figures: dict[str, Any], threads: tuple[int, ...]) -> str:
    now, before = figures["now"], figures["before"]

    def rate(f: dict[str, Any], n: int) -> str:
        value = f["cpu"]["images_per_s"][str(n)]
        return f"{value}" if n == 1 else f"{value} ({f['cpu']['ratio'][str(n)]:.2f})"

    def issue(n: int) -> str:
        return f"{ISSUE_35[n]}" if n == 1 else f"{ISSUE_35[n]} ({ISSUE_35[n] / (n * ISSUE_35[1]):.2f})"

    def pair(key: str, sub: str, form: str = "{:.2f}") -> str:
        return f"{form.format(before[key][sub])} | {form.format(now[key][sub])}"

    goals = {32: ">= 0.90", 64: ">= 0.80"}
    feed = "{images_per_s} ({ratio:.2f})"
    return "\n".join([
        "| | issue 35 (before, per sample) | before: per sample, this run | now: per chunk, this run | goal |",
        "|---|---|---|---|---|",
        *(f"| CPU path, {n} thread{'s' if n > 1 else ''}: images/s (of linear) | {issue(n)} | {rate(before, n)} "
          f"| {rate(now, n)} | {goals.get(n, '')} |" for n in threads),
        f"| GPU feeding path, {FEED_THREADS} threads: images/s (of {NVJPEG_PER_S}) | | "
        f"{feed.format(**before['gpu_feed'])} | {feed.format(**now['gpu_feed'])} | >= 0.90 |",
        f"| step fed by the CPU path ({FEED_THREADS} threads), of the step alone | | {pair('step', 'cpu_ratio')} "
        "| >= 0.95 |",
        f"| step fed by the GPU feeding path, of the step alone | | {pair('step', 'gpu_ratio')} | >= 0.95 |",
        f"| Python holding the GIL per sample, CPU path (us) | | {pair('gil_us', 'cpu', '{}')} | <= 5 |",
        f"| Python holding the GIL per sample, GPU feeding path (us) | | {pair('gil_us', 'gpu', '{}')} | <= 5 |",
    ])


def results_block(text: str, run: Run, seconds: float) -> str:
    argv, shown = sys.argv[1:], []  # the options that change the figures (not --json FILE, --write-results)
    while argv:
        arg = argv.pop(0)
        if arg == "--json":
            argv = argv[1:]
        elif not arg.startswith(("--json=", "--write-results")):
            shown.append(arg)
    command = " ".join(["python bench/emulated_cores.py", *shown])
    return "\n".join([
        "<!-- emulated_cores:begin -->",
        "## Emulated cores: the GIL's ceiling on this machine (#35, `bench/emulated_cores.py`)",
        "",
        f"`{command}` on {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, {run.wait_text}, epochs of "
        f"{run.epoch_size} samples (a quarter with one thread) drawn from {run.images} ImageNet-like JPEGs, "
        f"train preset, batch {BATCH}, "
        f"best of {run.epochs} later epochs; {seconds:.0f} s in all. Each image's decode is a wait without the "
        "GIL, so each thread acts as one more core (the script's docstring). \"before\" forces the per-sample "
        "path (`turbofeed.engine.choose.chunked` patched to False: the CPU and the GPU feeding path) in the same "
        "run; the issue's column is its table (the landed code before the per-chunk path, 1000 images).",
        "",
        text,
        "<!-- emulated_cores:end -->",
    ])


def setup(args: argparse.Namespace) -> Run:
    shards = find_shards(args.data)
    if args.wait_ms is None:
        wait_s = median_decode_s(shards[0])
        wait_text = f"wait {1e3 * wait_s:.2f} ms (the median decode measured here)"
    else:
        wait_s = args.wait_ms / 1e3
        wait_text = f"wait {args.wait_ms:.2f} ms (given)"
    return Run(shards=shards, images=len(turbofeed.DataLoader(shards, batch_size=1).dataset), wait_s=wait_s,
               wait_text=wait_text, threads=QUICK_THREADS if args.quick else THREADS,
               epochs=args.epochs or (1 if args.quick else 3),
               epoch_size=args.epoch_size or (1024 if args.quick else 8192), quick=args.quick)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DEFAULT_DATA, help="folder of ImageNet-like .tar shards")
    ap.add_argument("--wait-ms", type=float, help="each decode's wait (default: the median decode measured here)")
    ap.add_argument("--epochs", type=int, help="timed epochs per loader, after the first (default 3; --quick 1)")
    ap.add_argument("--epoch-size", type=int, help="samples per epoch (default 8192; --quick 1024)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1, 8, 16 threads, short epochs")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--write-results", action="store_true", help="write the table into bench/RESULTS.md")
    args = ap.parse_args()
    started = time.perf_counter()
    torch.set_num_threads(1)  # the tiny tensors' arithmetic: no intra-op threads spinning (gpu_feed_cost.py)
    run = setup(args)
    say(f"emulated decode: {run.wait_text}")
    figures = measure(run)
    seconds = time.perf_counter() - started
    text = table(figures, run.threads)
    print(text)
    print(f"\n{run.wait_text}; {seconds:.0f} s in all")
    if args.json:
        settings = {"wait_ms": round(1e3 * run.wait_s, 3), "batch_size": BATCH, "epochs": run.epochs,
                    "epoch_size": run.epoch_size, "images": run.images, "cores": os.cpu_count(),
                    "seconds": round(seconds)}
        with open(args.json, "w") as f:
            json.dump({**figures["now"], "before": figures["before"], "settings": settings}, f, indent=1)
    if args.write_results:
        write_block(os.path.join(HERE, "RESULTS.md"), results_block(text, run, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
