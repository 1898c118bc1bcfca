#!/usr/bin/env python3
"""GPU decode benchmark: CPU path vs raw batched nvJPEG vs the full GPU loader.

Rows, all on the same JPEGs in one run:
  cpu-loader        turbofeed.DataLoader on CPU threads (RandomResizedCrop + flip + normalize)
  nvjpeg-raw        batched GPU decode of bytes already in memory through turbofeed's GpuDecoder
                    (its header checks and copies included; bench/gpu_check.py's nvjpeg row
                    calls torchvision directly: the true ceiling)
  gpu-decode+aug    the same batches decoded and augmented on the GPU (no loader)
  gpu-loader        turbofeed.DataLoader(gpu_decode=True): reading, windows, decode, augment
  hybrid-loader     turbofeed.DataLoader(gpu_decode=True, hybrid=True): batches split
                    between the GPU and the CPU threads by measured speed
and the ratios gpu-loader / nvjpeg-raw and gpu-loader / cpu-loader.

    python bench/gpu_decode_benchmark.py --data bench/.data/imagenet_like --batch-size 256 --workers 16
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import tarfile
import time

import numpy as np
import torch

import turbofeed
from turbofeed import transforms as T


def timed(fn, repeats: int) -> float:
    """Median seconds of ``fn`` over ``repeats`` runs after one warm-up (CUDA synchronised)."""
    fn()
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize() if torch.cuda.is_available() else None
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize() if torch.cuda.is_available() else None
        samples.append(time.perf_counter() - started)
    return float(np.median(samples))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench/.data/imagenet_like")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    shards = sorted(glob.glob(os.path.join(args.data, "*.tar")))
    transform = T.imagenet_train(224, normalize=True)
    rows = {}

    def run_loader(**kw):
        loader = turbofeed.DataLoader(shards, batch_size=args.batch_size, num_workers=args.workers,
                                      shuffle=True, transform=transform, **kw)
        return lambda: sum(len(x) for x, _ in loader), loader.num_samples

    cpu_epoch, n = run_loader()
    rows["cpu-loader"] = n / timed(cpu_epoch, args.repeats)
    if not torch.cuda.is_available():
        print("no CUDA GPU: only the CPU row was measured")
    else:
        from turbofeed.decode.gpu import GpuDecoder
        from turbofeed.engine.gpu import resize_batch

        datas = []
        for shard in shards:
            with tarfile.open(shard) as tar:
                datas += [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".jpg")]
        decoder = GpuDecoder("cuda")
        batches = [datas[i:i + args.batch_size] for i in range(0, len(datas), args.batch_size)]
        rng = random.Random(0)

        def raw():
            for b in batches:
                decoder.decode(b)

        def decode_aug():
            for b in batches:
                images = [i for i in decoder.decode(b) if i is not None]  # refused: the CPU's job
                windows = [transform.window(int(i.shape[1]), int(i.shape[2]), rng) for i in images]
                resize_batch(images, windows, transform.size, transform.output)

        rows["nvjpeg-raw"] = len(datas) / timed(raw, args.repeats)
        rows["gpu-decode+aug"] = len(datas) / timed(decode_aug, args.repeats)
        gpu_epoch, _ = run_loader(gpu_decode=True, device="cuda")
        rows["gpu-loader"] = n / timed(gpu_epoch, args.repeats)
        hybrid_epoch, _ = run_loader(gpu_decode=True, device="cuda", hybrid=True)
        rows["hybrid-loader"] = n / timed(hybrid_epoch, args.repeats)
        rows["gpu-loader / nvjpeg-raw"] = rows["gpu-loader"] / rows["nvjpeg-raw"]
        rows["gpu-loader / cpu-loader"] = rows["gpu-loader"] / rows["cpu-loader"]
        rows["hybrid-loader / gpu-loader"] = rows["hybrid-loader"] / rows["gpu-loader"]
        print(f"device: {torch.cuda.get_device_name()}, decoder: {decoder.description}")
    for name, value in rows.items():
        print(f"{name:<26} {value:10.2f}" + ("" if "/" in name else " images/s"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
