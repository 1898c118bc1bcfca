#!/usr/bin/env python3
"""CPU throughput of turbofeed against peer loaders, side by side, in one run.

Every peer runs in its own virtual environment (bench/envs.py makes them) as a separate
process over the same shards, batch size, worker count and pipeline. Runs are
interleaved round-robin, so machine noise hits all peers alike; each run reports one
or more timed epochs after a warm-up epoch; the table gives the median and spread of
images/s over all timed epochs and the ratios the goals are stated in.

    python bench/envs.py                       # once: peer environments
    python bench/compare.py --make-data 5000 --repeats 3

Writes the block between <!-- compare:begin --> and <!-- compare:end --> of
bench/RESULTS.md, bench/results.json and the chart bench/results.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from envs import PEERS, python_of, ready  # noqa: E402

ORDER = ["pytorch", "webdataset", "spdl", "dali", "ffcv", "turboloader", "turbofeed", "ceiling"]
LABELS = {"pytorch": "PyTorch DataLoader + Pillow", "webdataset": "webdataset", "spdl": "SPDL",
          "dali": "DALI (CPU)", "ffcv": "FFCV", "turboloader": "turboloader (PyPI)", "turbofeed": "turbofeed",
          "ceiling": "decode ceiling: simplejpeg full decode, no resize"}


def run_one(peer: str, pipeline: str, args: argparse.Namespace) -> dict:
    cmd = [python_of(peer), os.path.join(HERE, "peers", f"peer_{peer}.py"), "--data", args.data,
           "--batch-size", str(args.batch_size), "--workers", str(args.workers), "--epochs", str(args.epochs),
           "--warmup", str(args.warmup), "--pipeline", pipeline]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"peer": peer, "pipeline": pipeline, "error": f"timed out after {args.timeout} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"peer": peer, "pipeline": pipeline, "error": (done.stderr or done.stdout)[-600:]}
    return json.loads(lines[-1])


def summarise(results: list[dict]) -> dict:
    """{(peer, pipeline): {"median", "min", "max", "n", "version"} or {"error"/"unsupported"}}."""
    table: dict = {}
    for r in results:
        key = (r["peer"], r["pipeline"])
        entry = table.setdefault(key, {"rates": [], "notes": set(), "version": r.get("version", "")})
        entry["rates"] += r.get("images_per_s", [])
        for note in ("error", "unsupported"):
            if note in r:
                entry["notes"].add(f"{note}: {r[note].strip().splitlines()[-1][:160]}")
    for entry in table.values():
        rates = entry.pop("rates")
        if rates:
            entry.update(median=statistics.median(rates), min=min(rates), max=max(rates), n=len(rates))
        entry["notes"] = sorted(entry["notes"])
    return table


def ratio(table: dict, a: str, b: str, pipeline: str) -> float | None:
    x, y = table.get((a, pipeline), {}), table.get((b, pipeline), {})
    return x["median"] / y["median"] if "median" in x and "median" in y else None


def markdown(table: dict, args: argparse.Namespace, pipelines: list[str], command: str) -> str:
    cpu = platform.processor() or ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = ["<!-- compare:begin -->", "## CPU throughput against peers (one run)", "",
             f"`{command}` on {datetime.date.today()}, {os.cpu_count()} cores ({cpu}), Python "
             f"{platform.python_version()}. Data: `../shared/bench/make_imagenet_like.py --count "
             f"{args.count_hint} --per-shard 500` (ImageNet-like JPEGs, ~89 KiB). Batch {args.batch_size}, "
             f"{args.workers} workers, {args.warmup} warm-up epoch then {args.epochs} timed epoch(s) per run, "
             f"{args.repeats} interleaved runs: median of all timed epochs (min-max).", "",
             "Pipelines: **train** = RandomResizedCrop(224, scale (0.08, 1), ratio (3/4, 4/3)) + horizontal flip, "
             "uint8 NCHW; **eval** = Resize(256) + CenterCrop(224), uint8; **train-float** = train normalised to "
             "float32 with ImageNet mean/std; **train-jitter** (on request) = train, then a user augmentation in torch "
             "ops on each uint8 (3, H, W) tensor (brightness/contrast jitter, `bench/peers/_common.py` `jitter`): "
             "turbofeed runs it in its worker threads after the fused crop, PyTorch in its worker processes.", ""]
    header = "| loader | version | " + " | ".join(f"{p} img/s" for p in pipelines) + " | " + \
        " | ".join(f"{p} / PyTorch" for p in pipelines) + " |"
    lines += [header, "|" + "---|" * (2 + 2 * len(pipelines))]
    for peer in ORDER:
        cells, ratios, version = [], [], ""
        for p in pipelines:
            e = table.get((peer, p))
            if e is None:
                cells.append("not run")
                ratios.append("")
                continue
            version = version or e.get("version", "")
            if "median" in e:
                cells.append(f"{e['median']:.0f} ({e['min']:.0f}-{e['max']:.0f})")
                r = ratio(table, peer, "pytorch", p)
                ratios.append(f"{r:.2f}x" if r else "")
            else:
                cells.append("; ".join(e["notes"])[:120] or "failed")
                ratios.append("")
        if all(c == "not run" for c in cells):
            continue
        lines.append(f"| {LABELS[peer]} | {version} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += ["", "Goals (train pipeline, same run):", ""]
    for p in pipelines:
        best = max((table.get((x, p), {}).get("median", 0), x) for x in ("dali", "ffcv"))
        parts = []
        if best[0]:
            parts.append(f"turbofeed / best of DALI, FFCV ({best[1]}) = "
                         f"{table[('turbofeed', p)]['median'] / best[0]:.2f}x (goal >= 1.5)"
                         if "median" in table.get(("turbofeed", p), {}) else "")
        r = ratio(table, "turbofeed", "pytorch", p)
        if r:
            parts.append(f"turbofeed / PyTorch = {r:.2f}x (goal >= 2.2)")
        c = ratio(table, "turbofeed", "ceiling", "train")
        if c and p == "train":
            parts.append(f"turbofeed / decode ceiling = {c:.2f} (goal >= 0.8)")
        if any(parts):
            lines.append(f"- {p}: " + "; ".join(x for x in parts if x))
    lines.append("<!-- compare:end -->")
    return "\n".join(lines)


def write_results(block: str) -> None:
    path = os.path.join(HERE, "RESULTS.md")
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    if "<!-- compare:begin -->" in text:
        text = re.sub(r"<!-- compare:begin -->.*<!-- compare:end -->", lambda _: block, text, flags=re.S)
    else:
        head, _, rest = text.partition("\n")
        text = f"{head}\n\n{block}\n{rest}"
    with open(path, "w") as f:
        f.write(text)


def plot(table: dict, pipelines: list[str]) -> None:
    """Bar chart with matplotlib from the `data` environment (not a turbofeed dependency)."""
    if not ready("data"):
        print("no bench/.venvs/data: skipping the chart (python bench/envs.py --peers data)")
        return
    rows = [(LABELS[p].split(":")[0], [table.get((p, q), {}).get("median", 0) for q in pipelines])
            for p in ORDER if any(table.get((p, q), {}).get("median") for q in pipelines)]
    script = f"""
import matplotlib; matplotlib.use("Agg")
import matplotlib.pyplot as plt, numpy as np
rows, pipelines = {rows!r}, {pipelines!r}
fig, ax = plt.subplots(figsize=(10, 4.5))
width = 0.8 / len(pipelines)
for k, p in enumerate(pipelines):
    xs = np.arange(len(rows)) + k * width
    ax.bar(xs, [r[1][k] for r in rows], width, label=p)
ax.set_xticks(np.arange(len(rows)) + width * (len(pipelines) - 1) / 2, [r[0] for r in rows], rotation=20, ha="right")
ax.set_ylabel("images/s (median)"); ax.set_title("CPU data loading, 2 workers, batch 64 (higher is better)")
ax.legend(); fig.tight_layout(); fig.savefig({os.path.join(HERE, "results.png")!r}, dpi=110)
"""
    subprocess.run([python_of("data"), "-c", script], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(HERE, ".data", "imagenet_like"))
    ap.add_argument("--make-data", type=int, default=0, metavar="N", help="create N images first if absent")
    ap.add_argument("--peers", default=",".join(ORDER))
    ap.add_argument("--pipelines", default="train,eval,train-float")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--installed-only", action="store_true", help="skip peers whose environment is missing")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch RESULTS.md, results.json or the chart")
    args = ap.parse_args()
    if args.make_data and not os.path.isdir(args.data):
        subprocess.run([python_of("data"), os.path.join(ROOT, "..", "shared", "bench", "make_imagenet_like.py"),
                        args.data, "--count", str(args.make_data), "--per-shard", "500"], check=True)
    args.count_hint = sum(1 for n in os.listdir(args.data) if n.endswith(".tar")) * 500
    peers = [p for p in args.peers.split(",") if p in PEERS]
    if args.installed_only:
        peers = [p for p in peers if ready(p)]
    missing = [p for p in peers if not ready(p)]
    if missing:
        raise SystemExit(f"no environment for {missing}: run python bench/envs.py --peers {','.join(missing)} "
                         "or pass --installed-only")
    pipelines = args.pipelines.split(",")
    results = []
    for repeat in range(args.repeats):
        for pipeline in pipelines:
            for peer in peers:
                if peer == "ceiling" and pipeline != "train":
                    continue  # one decode ceiling per run is enough
                started = time.perf_counter()
                r = run_one(peer, pipeline, args)
                results.append(r)
                shown = r.get("images_per_s") or r.get("error", r.get("unsupported", ""))[-120:]
                print(f"[{repeat + 1}/{args.repeats}] {pipeline:<11} {peer:<12} {shown} "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)
    table = summarise(results)
    command = "python bench/compare.py " + " ".join(sys.argv[1:])
    block = markdown(table, args, pipelines, command.strip())
    print(block)
    if not args.no_write:
        with open(os.path.join(HERE, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        write_results(block)
        plot(table, pipelines)


if __name__ == "__main__":
    main()
