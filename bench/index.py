#!/usr/bin/env python3
"""The automatic dataset index (issue #25): what a loader start costs with no command run
before, on 1M samples in 50 tar shards.

    python bench/index.py                      # 1M samples, 50 shards, in bench/.data/index-1m
    python bench/index.py --samples 100000 --shards 5 --no-write

The data is made once: per sample a 100-byte fake ``.jpg`` and a ``.cls`` label, keys
``%09d`` (the index, not the images, is what is measured). Every measurement runs in a
fresh Python process (imports excluded from the times); "page cache cold" rows evict the
shards' pages first (``posix_fadvise(DONTNEED)`` on those files only). Rows:

- first loader: ``IndexedDataset(DATA)`` with no index anywhere: it builds the index (every
  shard read) and writes it next to the data;
- later loaders: ``IndexedDataset(DATA)`` and ``DataLoader(DATA)``, mapping it (time, growth of
  the resident memory per sample);
- one shard rewritten: the next ``IndexedDataset(DATA)`` reads that shard alone and writes a new
  version of the index;
- 8 processes started together with no index (as torchrun starts the ranks of a node):
  how many built it, the time until the last one has its dataset, and the memory each
  holds (RSS and PSS, the index's pages shared between them, measured while all 8 live);
- ``index=False``: the same index built in memory, nothing looked for or written;
- for comparison, ``turbofeed index DATA`` (a fresh process, imports included).

The rows go into the ``autoindex`` block of bench/RESULTS.md ("Automatic dataset index
(#25)"); the ``index`` block (#17) is the record of the per-shard path this replaced.
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
BEGIN, END = "<!-- autoindex:begin -->", "<!-- autoindex:end -->"
_PAYLOAD = b"\xff\xd8\xff\xe0" + bytes(range(96))

# One measurement, run in a fresh interpreter: prints one JSON line. With GO, it waits for
# that file before starting (the 8-process row), and with READY/PEERS it stays alive until
# PEERS processes are ready, so the memory they share is shared when it is measured.
_PROBE = r"""
import json, os, sys, time, logging
mode, data, cache = sys.argv[1], sys.argv[2], sys.argv[3]
import numpy as np
import torch  # imports are not what is measured: the loader's first use of torch would be
import turbofeed
import turbofeed.torch
from turbofeed.io import IndexedDataset
said = []
class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger("turbofeed").addHandler(Keep())
logging.getLogger("turbofeed").setLevel(logging.INFO)
def memory():
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.split(":")[0] in ("Rss", "Pss"):
                out[line.split(":")[0].lower()] = int(line.split()[1]) * 1024
    return out
go = os.environ.get("GO")
while go and not os.path.exists(go):
    time.sleep(0.002)
before = memory()
started = time.perf_counter()
if mode == "loader":
    obj = turbofeed.DataLoader(turbofeed.Dataset(data, cache_dir=cache), batch_size=256, num_workers=2)
    n = obj.num_samples
else:
    obj = IndexedDataset(data, cache_dir=cache, index=False if mode == "false" else None)
    n = obj.num_samples
seconds = time.perf_counter() - started
ready, peers = os.environ.get("READY"), int(os.environ.get("PEERS", "0"))
if ready:
    open(os.path.join(ready, str(os.getpid())), "w").close()
    while len(os.listdir(ready)) < peers:
        time.sleep(0.01)
after = memory()
built = [m for m in said if "turbofeed: dataset index" in m and " 0 read" not in m]
print(json.dumps({"seconds": seconds, "rss": after["rss"] - before["rss"], "pss": after["pss"] - before["pss"],
                  "samples": n, "built": len(built), "waited": sum("waiting" in m for m in said),
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


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}


def probe(mode: str, data: str, cache: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, mode, data, cache], capture_output=True, text=True,
                          env=_env(), check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def together(count: int, data: str, cache: str, work: str) -> tuple[float, list[dict]]:
    """``count`` probes of ``IndexedDataset(DATA)`` released at once; (seconds from the release
    until the last has its dataset, their results)."""
    go, ready = os.path.join(work, "go"), os.path.join(work, "ready")
    os.makedirs(ready)
    env = {**_env(), "GO": go, "READY": ready, "PEERS": str(count)}
    procs = [subprocess.Popen([sys.executable, "-c", _PROBE, "index", data, cache], stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(count)]
    time.sleep(20)  # every one imported and waiting at the line (2 busy cores: generous)
    released = time.perf_counter()
    open(go, "w").close()
    while len(os.listdir(ready)) < count and all(p.poll() is None for p in procs):
        time.sleep(0.005)
    last = time.perf_counter() - released
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    return last, results


def build(data: str, cache: str) -> float:
    """Seconds ``turbofeed index DATA`` takes in a fresh process (imports included)."""
    env = {**_env(), "TURBOFEED_CACHE_DIR": cache}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "turbofeed", "index", data], capture_output=True, text=True, env=env,
                   check=True)
    return time.perf_counter() - started


def rewrite(path: str) -> None:
    """Rewrite the shard at ``path`` in place with the same bytes (a new ctime: another
    version of the file to the index)."""
    with open(path, "rb") as f:
        payload = f.read()
    with open(path, "r+b") as f:
        f.write(payload)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(HERE, ".data", "index-1m"))
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each warm measurement (median)")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--no-false", action="store_true", help="skip the index=False row")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch bench/RESULTS.md")
    args = parser.parse_args()
    make_data(args.data, args.samples, args.shards)
    shards = sorted(os.path.join(args.data, n) for n in os.listdir(args.data) if n.endswith(".tar"))
    index_file = os.path.join(args.data, "turbofeed.index")
    rows = []
    n = args.samples

    def clear() -> None:
        if os.path.exists(index_file):
            os.remove(index_file)

    def row(what: str, command: str, seconds: float, note: str = "", rss: float | None = None,
            pss: float | None = None) -> None:
        rows.append((what, command, f"{seconds:.2f}", "" if rss is None else f"{rss / n:.1f}",
                     "" if pss is None else f"{pss / n:.1f}", note))
        print(f"{what}: {seconds:.2f} s {note}", file=sys.stderr)

    with tempfile.TemporaryDirectory() as work:
        cache = os.path.join(work, "cache")
        clear()
        evict(shards)
        first = probe("index", args.data, cache)
        assert first["index"] == index_file and first["samples"] == n and first["built"] == 1, first
        size = os.path.getsize(index_file)
        row("first loader, no index, page cache cold: builds and writes it", "IndexedDataset(DATA)", first["seconds"],
            rss=first["rss"])
        runs = [probe("index", args.data, cache) for _ in range(args.repeats)]
        assert not any(r["built"] for r in runs), runs
        row("later loader: maps it", "IndexedDataset(DATA)", statistics.median(r["seconds"] for r in runs),
            rss=statistics.median(r["rss"] for r in runs), pss=statistics.median(r["pss"] for r in runs))
        loaders = [probe("loader", args.data, cache) for _ in range(args.repeats)]
        row("later loader: maps it", "DataLoader(DATA, batch_size=256, num_workers=2)",
            statistics.median(r["seconds"] for r in loaders), rss=statistics.median(r["rss"] for r in loaders),
            pss=statistics.median(r["pss"] for r in loaders))
        clear()
        evict(shards)
        row("for comparison: `turbofeed index DATA`, page cache cold (imports included)",
            "python -m turbofeed index DATA", build(args.data, cache))
        rewrite(shards[len(shards) // 2])
        again = probe("index", args.data, cache)
        assert again["built"] == 1, again
        row("one shard rewritten: read again, a new version written", "IndexedDataset(DATA)", again["seconds"])
        clear()
        evict(shards)
        last, results = together(args.processes, args.data, cache, work)
        builds = sum(r["built"] for r in results)
        row(f"{args.processes} processes started together, no index, page cache cold: until the last has it",
            f"{args.processes} x IndexedDataset(DATA)", last,
            note=f"{builds} built ({max(r['seconds'] for r in results if r['built']):.2f} s); "
                 f"{sum(r['waited'] > 0 for r in results)} waited; per process "
                 f"{statistics.median(r['seconds'] for r in results):.2f} s median, "
                 f"{max(r['seconds'] for r in results):.2f} s slowest",
            rss=statistics.median(r["rss"] for r in results), pss=statistics.median(r["pss"] for r in results))
        if not args.no_false:
            false = probe("false", args.data, cache)
            row("index=False: every shard indexed in memory, nothing written", "IndexedDataset(DATA, index=False)",
                false["seconds"], rss=false["rss"])
    data_bytes = sum(os.path.getsize(p) for p in shards)
    lines = [BEGIN, "## Automatic dataset index (#25)", "",
             f"`python bench/index.py --samples {n} --shards {args.shards}` on {datetime.date.today()}, "
             f"{os.cpu_count()} cores (shared with other work: load average {os.getloadavg()[0]:.1f} at the end), "
             f"Python {platform.python_version()}. Data: {n} samples in {len(shards)} tar shards "
             f"({data_bytes / 2**30:.2f} GiB: a 100-byte fake .jpg and a .cls per sample, keys `%09d`). No command "
             "is run before. Each row is a fresh process (imports not timed); later-loader rows are the median of "
             f"{args.repeats}. Page cache cold: the shards' pages evicted first with `posix_fadvise(DONTNEED)`. "
             "RSS and PSS: growth of the process's resident and proportional set while constructing, per sample "
             "(PSS divides pages shared with other processes between them). Index file: "
             f"{size / 2**20:.1f} MiB, {size / n:.1f} bytes/sample.", "",
             "| what | command | seconds | RSS bytes/sample | PSS bytes/sample | |", "|---|---|---|---|---|---|"]
    lines += [f"| {' | '.join(cells)} |" for cells in rows]
    lines += ["", "Goals: first loader <= 15 s; later loaders <= 0.2 s and <= 50 bytes/sample resident; "
              "8 processes build once.", END]
    block = "\n".join(lines)
    print(block)
    if not args.no_write:
        write_block(os.path.join(HERE, "RESULTS.md"), block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
