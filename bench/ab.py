#!/usr/bin/env python3
"""turbofeed against itself: two source trees (e.g. the last landed commit and this
change) on the same shards, interleaved round by round, so the machine's noise hits both.

Each run is ``bench/peers/peer_turbofeed.py`` in a fresh process with ``PYTHONPATH``
set to one tree's ``src`` (each tree has its native decoder built in place:
``python setup.py build_ext --inplace``). Epoch 1 of a run is reported apart from the
later ones: work done once per sample (checks remembered after the first sight) shows
only there; so is each tree's ratio of a run's epoch 1 to its later epochs (the median
over runs of each run's own ratio: what the first epoch of a fresh process costs).
Each tree gets a cache folder of its own (``TURBOFEED_CACHE_DIR``, a temporary folder
unless ``--cache-dir``), so trees that write different dataset index versions do not
rebuild each other's: its first run builds the index, before any epoch is timed.

    git worktree add /tmp/base e553355 && (cd /tmp/base && python setup.py build_ext --inplace -q)
    python bench/ab.py --a /tmp/base --b . --data bench/.data/imagenet_like --rounds 5

Prints a table of medians (images/s) and the B/A ratios; ``--json FILE`` keeps the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(tree: str, args: argparse.Namespace, cache: str) -> list[float]:
    """images/s of each epoch of one run (the first one included)."""
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.abspath(tree), "src"), "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore", "TURBOFEED_CACHE_DIR": cache}
    cmd = [sys.executable, os.path.join(HERE, "peers", "peer_turbofeed.py"), "--data", args.data,
           "--batch-size", str(args.batch_size), "--workers", str(args.workers), "--warmup", "0",
           "--epochs", str(args.epochs), "--pipeline", args.pipeline]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        sys.exit(f"ab.py: the run on {tree} failed:\n{(done.stderr or done.stdout)[-1500:]}")
    return json.loads(lines[-1])["images_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="baseline source tree (holds src/turbofeed)")
    ap.add_argument("--b", required=True, help="changed source tree")
    ap.add_argument("--data", required=True, help="folder of tar shards (make_imagenet_like.py)")
    ap.add_argument("--pipeline", default="train", choices=["train", "eval", "train-float", "train-jitter"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run (the first reported apart)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", help="write every run's epochs here")
    ap.add_argument("--cache-dir", help="the trees' cache folders go here (A/ and B/; default: a temporary folder)")
    args = ap.parse_args()
    base = args.cache_dir or tempfile.mkdtemp(prefix="turbofeed-ab-")
    caches = {side: os.path.join(base, side.upper()) for side in ("a", "b")}
    runs: dict[str, list[list[float]]] = {"a": [], "b": []}
    for r in range(args.rounds):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):  # alternate who goes first
            runs[side].append(run(getattr(args, side), args, caches[side]))
            print(f"round {r + 1} {side}: " + " ".join(f"{x:.0f}" for x in runs[side][-1]), flush=True)
    first = {s: statistics.median(e[0] for e in runs[s]) for s in runs}
    later = {s: statistics.median(x for e in runs[s] for x in e[1:]) for s in runs}
    print(f"\n| {args.pipeline}, images/s (median) | A {args.a} | B {args.b} | B/A |\n|---|---|---|---|")
    print(f"| epoch 1 | {first['a']:.0f} | {first['b']:.0f} | {first['b'] / first['a']:.3f} |")
    if args.epochs > 1:
        print(f"| epochs 2-{args.epochs} | {later['a']:.0f} | {later['b']:.0f} | {later['b'] / later['a']:.3f} |")
        ratio = {s: statistics.median(e[0] / statistics.median(e[1:]) for e in runs[s]) for s in runs}
        print(f"| epoch 1 / later epochs of a run (median of runs) | {ratio['a']:.3f} | {ratio['b']:.3f} | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
