#!/usr/bin/env python3
"""The dataset index (issue #17): loader start, memory and build time against the per-shard
path, on 1M samples in 50 tar shards.

    python bench/index.py                      # 1M samples, 50 shards, in bench/.data/index-1m
    python bench/index.py --samples 100000 --shards 5 --no-write

The data is made once: per sample a 100-byte fake ``.jpg`` and a ``.cls`` label, keys
``%09d`` (the index, not the images, is what is measured). Every measurement runs in a
fresh Python process (imports excluded from the times); "page cache cold" rows evict the
shards' and the index's pages first (``posix_fadvise(DONTNEED)`` on those files only),
"warm" rows read them from memory. Rows:

- per-shard path, cold: no per-shard JSON index cached yet (tarfile's header parse, as
  before this change, and the fast header walk now used by both paths);
- per-shard path, warm: every shard's JSON index cached (the start every run paid until now);
- ``turbofeed index DATA``: the cold build of the dataset index, as the CLI runs it;
- with the index: ``Dataset(DATA)`` and ``DataLoader(DATA)`` construction, RSS growth per
  sample, the index file's bytes per sample.

The rows go into the ``index`` block of bench/RESULTS.md ("Dataset index (#17)").
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

from _results import write_block  # bench/ is sys.path[0] when run as a script

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BEGIN, END = "<!-- index:begin -->", "<!-- index:end -->"
_PAYLOAD = b"\xff\xd8\xff\xe0" + bytes(range(96))

# One measurement, run in a fresh interpreter: prints one JSON line.
_PROBE = r"""
import json, os, sys, time
mode, data, cache = sys.argv[1], sys.argv[2], sys.argv[3]
import numpy as np
import torch  # imports are not what is measured: the loader's first use of torch would be
import turbofeed
import turbofeed.torch
from turbofeed.io import Dataset
from turbofeed.io.local import index as per_shard
if mode == "tarfile":
    per_shard.fast_members = lambda fd, size: None  # the header parse before this change
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
before = rss()
started = time.perf_counter()
if mode == "loader":
    obj = turbofeed.DataLoader(data, batch_size=256, num_workers=2, cache_dir=cache)
    n = obj.num_samples
else:
    obj = Dataset(data, cache_dir=cache, index=None if mode == "index" else False)
    n = obj.num_samples
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "rss": rss() - before, "samples": n,
                  "index": getattr(getattr(obj, "index", None), "path", None)}))
"""


def make_data(path: str, samples: int, shards: int) -> None:
    """``shards`` tars of ``samples // shards`` samples each (skipped when complete)."""
    os.makedirs(path, exist_ok=True)
    per = samples // shards
    for s in range(shards):
        name = os.path.join(path, f"shard-{s:06d}.tar")
        if os.path.exists(name):
            continue
        out = bytearray()
        for gid in range(s * per, (s + 1) * per):
            for ext, payload in (("jpg", _PAYLOAD), ("cls", str(gid % 1000).encode())):
                info = tarfile.TarInfo(f"{gid:09d}.{ext}")
                info.size, info.mode = len(payload), 0o644
                out += info.tobuf(format=tarfile.USTAR_FORMAT) + payload + bytes(-len(payload) % 512)
        out += bytes(1024)
        with open(name + ".tmp", "wb") as f:
            f.write(out)
        os.replace(name + ".tmp", name)
        print(f"wrote {name}", file=sys.stderr)


def evict(paths: list[str]) -> None:
    """Drop these files' pages from the page cache (theirs only)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages are not dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def probe(mode: str, data: str, cache: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}
    done = subprocess.run([sys.executable, "-c", _PROBE, mode, data, cache], capture_output=True, text=True,
                          env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def build(data: str, cache: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TURBOFEED_CACHE_DIR": cache}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "turbofeed", "index", data], capture_output=True, text=True,
                          env=env, check=True)
    return time.perf_counter() - started, done.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(HERE, ".data", "index-1m"))
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each warm measurement (median)")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch bench/RESULTS.md")
    args = parser.parse_args()
    make_data(args.data, args.samples, args.shards)
    shards = sorted(os.path.join(args.data, n) for n in os.listdir(args.data) if n.endswith(".tar"))
    index_file = os.path.join(args.data, "turbofeed.index")
    if os.path.exists(index_file):
        os.remove(index_file)
    rows = []
    n = args.samples

    def row(what: str, command: str, seconds: float, note: str = "", rss: float | None = None) -> None:
        rows.append((what, command, seconds, "" if rss is None else f"{rss / n:.1f}", note))
        print(f"{what}: {seconds:.2f} s {note}", file=sys.stderr)

    with tempfile.TemporaryDirectory() as work:
        for mode, label in (("tarfile", "tarfile header parse (before)"), ("per-shard", "fast header walk")):
            cache = os.path.join(work, f"cache-{mode}")
            evict(shards)
            cold = probe(mode, args.data, cache)
            row(f"per-shard path, cold: no JSON index cached, {label}, page cache cold",
                "Dataset(DATA, index=False)", cold["seconds"])
        warm = [probe("per-shard", args.data, cache) for _ in range(args.repeats)]
        row("per-shard path, warm: every shard's JSON index cached", "Dataset(DATA, index=False)",
            statistics.median(w["seconds"] for w in warm), rss=statistics.median(w["rss"] for w in warm))
        evict(shards)
        seconds, printed = build(args.data, os.path.join(work, "cache-build"))
        row("`turbofeed index DATA`, cold (page cache cold)", "python -m turbofeed index DATA", seconds,
            note=f"(printed: {printed})")
        size = os.path.getsize(index_file)
        evict([index_file])
        first = probe("index", args.data, os.path.join(work, "cache-index"))
        assert first["index"] == index_file and first["samples"] == n, first
        row("with the index: Dataset, index pages cold", "Dataset(DATA)", first["seconds"], rss=first["rss"])
        runs = [probe("index", args.data, os.path.join(work, "cache-index")) for _ in range(args.repeats)]
        row("with the index: Dataset, warm", "Dataset(DATA)", statistics.median(r["seconds"] for r in runs),
            rss=statistics.median(r["rss"] for r in runs))
        loaders = [probe("loader", args.data, os.path.join(work, "cache-index")) for _ in range(args.repeats)]
        row("with the index: DataLoader, warm", "DataLoader(DATA, batch_size=256, num_workers=2)",
            statistics.median(r["seconds"] for r in loaders), rss=statistics.median(r["rss"] for r in loaders))
    data_bytes = sum(os.path.getsize(p) for p in shards)
    lines = [BEGIN, "## Dataset index (#17)", "",
             f"`python bench/index.py --samples {n} --shards {args.shards}` on {datetime.date.today()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}. Data: {n} samples in {len(shards)} tar "
             f"shards ({data_bytes / 2**30:.2f} GiB: a 100-byte fake .jpg and a .cls per sample, keys `%09d`). "
             "Each row is a fresh process (imports not timed); warm rows are the median of "
             f"{args.repeats}. Page cache cold: the shards' (or the index's) pages evicted first with "
             "`posix_fadvise(DONTNEED)`. RSS: growth of the process's resident memory while constructing, "
             f"per sample. Index file: {size / 2**20:.1f} MiB, {size / n:.1f} bytes/sample.", "",
             "| what | command | seconds | RSS bytes/sample | |", "|---|---|---|---|---|"]
    lines += [f"| {what} | `{command}` | {seconds:.2f} | {rss} | {note} |" for what, command, seconds, rss, note in rows]
    lines += ["", "Goals: warm loader start <= 2 s, <= 100 bytes/sample resident, cold build <= 30 s on 2 cores.", END]
    block = "\n".join(lines)
    print(block)
    if not args.no_write:
        write_block(os.path.join(HERE, "RESULTS.md"), block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
