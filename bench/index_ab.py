#!/usr/bin/env python3
"""What building the dataset index costs, two source trees against each other (e.g. the
last landed commit and this change) on the same shards, interleaved round by round.

Each build is ``turbofeed.io.build_index(DATA, out=<new file>, threads=N)`` in a fresh
process with ``PYTHONPATH`` set to one tree's ``src`` (each tree's native extension
built in place); the time is the build's own (``IndexSummary.seconds``: every shard
read, joined, written; imports excluded), and the CPU time of every thread of the
process over the build (steady on a machine shared with other work, where the wall
clock is not). The shards' pages stay in the page cache
(the benchmark data is read first), so this is the CPU cost: since format version 5
(#35 item 3) the build checks every JPEG's whole scan, which the first epoch of every
new process did before.

    python bench/index_ab.py --a /tmp/base --b . --data bench/.data/in1k --rounds 5

Prints the median seconds (wall and CPU) of each tree, their ratio, and per sample.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, sys, time
from turbofeed.io import build_index
cpu = time.process_time()
done = build_index(sys.argv[1], out=sys.argv[2], threads=int(sys.argv[3]), progress=False)
print(json.dumps({"seconds": done.seconds, "cpu": time.process_time() - cpu, "samples": done.samples,
                  "bytes": done.bytes}))
"""


def build(tree: str, data: str, out: str, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.abspath(tree), "src"), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", CHILD, data, out, str(threads)], capture_output=True, text=True,
                          env=env, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"index_ab.py: the build on {tree} failed:\n{done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="baseline source tree (holds src/turbofeed)")
    ap.add_argument("--b", required=True, help="changed source tree")
    ap.add_argument("--data", required=True, help="folder of tar shards")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=8, help="shards indexed at once (turbofeed index's default)")
    args = ap.parse_args()
    for name in sorted(os.listdir(args.data)):  # into the page cache: the CPU cost is measured
        if name.endswith(".tar"):
            with open(os.path.join(args.data, name), "rb") as f:
                while f.read(1 << 24):
                    pass
    runs: dict[str, list[dict]] = {"a": [], "b": []}
    with tempfile.TemporaryDirectory(prefix="turbofeed-index-ab-") as tmp:
        for r in range(args.rounds):
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                out = os.path.join(tmp, f"{side}{r}.index")
                runs[side].append(build(getattr(args, side), args.data, out, args.threads))
                print(f"round {r + 1} {side}: {runs[side][-1]['seconds']:.3f} s, "
                      f"CPU {runs[side][-1]['cpu']:.3f} s", flush=True)
    n = runs["a"][0]["samples"]
    print(f"\n| index build, {n} samples, {args.threads} threads | A {args.a} | B {args.b} | B/A |\n|---|---|---|---|")
    for key, what in (("seconds", "wall"), ("cpu", "CPU, every thread")):
        med = {s: statistics.median(x[key] for x in runs[s]) for s in runs}
        print(f"| {what}: seconds (median of {args.rounds}) | {med['a']:.3f} | {med['b']:.3f} | "
              f"{med['b'] / med['a']:.2f} |")
        print(f"| {what}: ms per sample | {med['a'] / n * 1e3:.3f} | {med['b'] / n * 1e3:.3f} | |")
    print(f"| index bytes per sample | {runs['a'][0]['bytes'] / n:.1f} | {runs['b'][0]['bytes'] / n:.1f} | |")


if __name__ == "__main__":
    main()
