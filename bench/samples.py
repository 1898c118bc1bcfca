#!/usr/bin/env python3
"""General samples and user callables, against the plain image pipeline, in one run.

    python bench/samples.py --data bench/.data/imagenet_like --repeats 3

Builds (once, under ``--work``, default ``bench/.data/laion_like``) a LAION-style copy of
the ImageNet-like shards: each ``KEY.jpg`` gets a ``KEY.txt`` caption (~60 bytes) and a
``KEY.json`` metadata record (~120 bytes), as img2dataset writes them. Then, interleaved,
``--repeats`` timed epochs (after one warm-up each) of the turbofeed DataLoader with
RandomResizedCrop(224) + flip, uint8, batch 64, 2 worker threads, shuffled:

- ``image only``: (images, labels) batches from the same shards;
- ``image + caption + meta``: ``fields={"image": "jpg", "caption": "txt", "meta": "json"}``;
- ``python callable``: image only, plus a user callable that spends ~0.3 ms in pure
  Python per sample (holding the GIL), with 1 and 2 worker threads: how far threads scale
  when user code holds the GIL;
- ``torch callable``: the same with a torch-op callable (brightness/contrast jitter),
  1 and 2 threads: torch ops release the GIL in their kernels.

Prints a markdown table of median images/s and ratios; paste it into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import statistics
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))

import _common as C  # noqa: E402

import turbofeed  # noqa: E402
from turbofeed import transforms as T  # noqa: E402


def make_laion_like(data: str, work: str) -> str:
    """The shards of ``data`` with a caption and a metadata member added per sample."""
    os.makedirs(work, exist_ok=True)
    for src in sorted(glob.glob(os.path.join(data, "*.tar"))):
        dst = os.path.join(work, os.path.basename(src))
        if os.path.exists(dst):
            continue
        with tarfile.open(src) as tin, tarfile.open(dst + ".tmp", "w") as tout:
            for member in tin.getmembers():
                payload = tin.extractfile(member).read()
                tout.addfile(member, io.BytesIO(payload))
                key, ext = member.name.split(".", 1)
                if ext == "jpg":
                    for name, body in ((f"{key}.txt", f"a photo of sample {key}, taken somewhere".encode()),
                                       (f"{key}.json", json.dumps({"key": key, "width": 500, "height": 375,
                                                                   "similarity": 0.31, "url": f"http://x/{key}"})
                                        .encode())):
                        info = tarfile.TarInfo(name)
                        info.size = len(body)
                        tout.addfile(info, io.BytesIO(body))
        os.replace(dst + ".tmp", dst)
    return work


def python_heavy(x):
    """~0.3 ms of pure Python per sample: holds the GIL the whole time."""
    total = 0
    for i in range(6000):
        total += i * i % 7
    return x if total >= 0 else None


CONFIGS = {
    "image only": dict(transform=T.imagenet_train(224)),
    "image + caption + meta": dict(transform=T.imagenet_train(224),
                                   fields={"image": "jpg", "caption": "txt", "meta": "json"}),
    "python callable x1 thread": dict(transform=T.Compose([*T.imagenet_train(224).ops, python_heavy]), num_workers=1),
    "python callable x2 threads": dict(transform=T.Compose([*T.imagenet_train(224).ops, python_heavy])),
    "torch callable x1 thread": dict(transform=T.Compose([*T.imagenet_train(224).ops, C.jitter]), num_workers=1),
    "torch callable x2 threads": dict(transform=T.Compose([*T.imagenet_train(224).ops, C.jitter])),
}


def epoch_rate(loader) -> float:
    started, n = time.perf_counter(), 0
    for batch in loader:
        n += len(batch["__key__"]) if isinstance(batch, dict) else len(batch[1])
    return n / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(HERE, ".data", "imagenet_like"))
    ap.add_argument("--work", default=os.path.join(HERE, ".data", "laion_like"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names of CONFIGS")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # as compare.py's OMP_NUM_THREADS=1: the worker threads are the parallelism
    shards = make_laion_like(args.data, args.work)
    names = args.configs.split(",")
    loaders = {name: turbofeed.DataLoader(shards, batch_size=64, **{"num_workers": 2, **CONFIGS[name]},
                                          shuffle=True, seed=0) for name in names}
    for loader in loaders.values():
        epoch_rate(loader)  # warm-up: page cache, indexes
    rates: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        for name, loader in loaders.items():
            rates[name].append(epoch_rate(loader))
            print(f"[{repeat + 1}/{args.repeats}] {name:<28} {rates[name][-1]:7.0f} img/s", flush=True)
    base = statistics.median(rates[names[0]])
    print(f"\n`python bench/samples.py --repeats {args.repeats}`, {os.cpu_count()} cores, batch 64, "
          "RandomResizedCrop(224) + flip, uint8, shuffled; median of the timed epochs (min-max).\n")
    print(f"| pipeline | img/s | vs {names[0]} |\n|---|---|---|")
    for name in names:
        med = statistics.median(rates[name])
        print(f"| {name} | {med:.0f} ({min(rates[name]):.0f}-{max(rates[name]):.0f}) | {med / base:.2f} |")


if __name__ == "__main__":
    main()
