#!/usr/bin/env python3
"""What a fresh process's first epoch costs against its later epochs (#35 item 3), for two
source trees (e.g. the last landed commit and this change), interleaved round by round.

Each run is a new Python process with ``PYTHONPATH`` set to one tree's ``src`` (its
native extension built in place) and ``TURBOFEED_CACHE_DIR`` set to that tree's own
folder (so trees writing different dataset index versions do not rebuild each other's;
each tree's first run builds its index before anything is timed). It makes a
``turbofeed.DataLoader`` (train preset: RandomResizedCrop 224 + flip, uint8, batch 64,
2 threads, shuffled) over the shards and runs ``--epochs`` epochs, timing each by the
wall clock and by the process's CPU time (every thread's: ``time.process_time``).

On a machine shared with other work the wall clock swings by tens of percent from one
epoch to the next; the CPU time a decode-bound epoch takes does not, so the CPU-time
ratio (images per CPU second of epoch 1 / of the later epochs, per run, median over
runs) is what says what epoch 1 costs; the wall-clock ratio is printed too.

    python bench/first_epoch.py --a /tmp/base --b . --data bench/.data/in1k --rounds 5
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
import glob, json, os, sys, time
import turbofeed
from turbofeed import transforms as T
data, epochs = sys.argv[1], int(sys.argv[2])
loader = turbofeed.DataLoader(sorted(glob.glob(os.path.join(data, "*.tar"))), batch_size=64, num_workers=2,
                              shuffle=True, seed=0, transform=T.imagenet_train(224))
out = []
for e in range(epochs):
    n, wall, cpu = 0, time.perf_counter(), time.process_time()
    for images, _ in loader:
        n += len(images)
    out.append({"images": n, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu})
print(json.dumps(out))
"""


def run(tree: str, data: str, epochs: int, cache: str) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.abspath(tree), "src"), "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore", "TURBOFEED_CACHE_DIR": cache}
    done = subprocess.run([sys.executable, "-c", CHILD, data, str(epochs)], capture_output=True, text=True,
                          env=env, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"first_epoch.py: the run on {tree} failed:\n{done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ratios(epochs: list[dict], key: str) -> float:
    """Images per second (of ``key``: wall or cpu) of epoch 1 over the median of the later ones."""
    rate = [e["images"] / e[key] for e in epochs]
    return rate[0] / statistics.median(rate[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="baseline source tree (holds src/turbofeed)")
    ap.add_argument("--b", required=True, help="changed source tree")
    ap.add_argument("--data", required=True, help="folder of tar shards (make_imagenet_like.py)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run (at least 2)")
    ap.add_argument("--json", help="write every run's epochs here")
    args = ap.parse_args()
    runs: dict[str, list[list[dict]]] = {"a": [], "b": []}
    with tempfile.TemporaryDirectory(prefix="turbofeed-first-epoch-") as tmp:
        for r in range(args.rounds):
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                runs[side].append(run(getattr(args, side), args.data, args.epochs, os.path.join(tmp, side)))
                shown = " ".join(f"{e['images'] / e['wall']:.0f}/{e['images'] / e['cpu']:.0f}" for e in runs[side][-1])
                print(f"round {r + 1} {side}: images/s wall/cpu per epoch: {shown}", flush=True)
    print(f"\n| epoch 1 / later epochs of a fresh process (median of {args.rounds} runs) | A {args.a} | B {args.b} |"
          "\n|---|---|---|")
    for key, what in (("cpu", "images per CPU second (every thread)"), ("wall", "images per second (wall)")):
        print(f"| {what} | {statistics.median(ratios(e, key) for e in runs['a']):.3f} | "
              f"{statistics.median(ratios(e, key) for e in runs['b']):.3f} |")
    for side in "ab":
        per = [e["cpu"] / e["images"] * 1e3 for run_ in runs[side] for e in run_[1:]]
        first = [run_[0]["cpu"] / run_[0]["images"] * 1e3 for run_ in runs[side]]
        print(f"{side.upper()}: CPU ms per image, epoch 1 {statistics.median(first):.3f}, "
              f"later {statistics.median(per):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
