#!/usr/bin/env python3
"""Streaming s3:// shards larger than the node cache (issue #17): one shuffled epoch through
a node cache of 30% of the data, checked and timed against the same epoch from local files.

    .venv/bin/python bench/streaming.py            # print the table
    .venv/bin/python bench/streaming.py --write    # and append a row to bench/RESULTS.md

Data: 5000 ImageNet-like JPEGs in 20 tar shards of 250 (``../shared/bench/make_imagenet_like.py
OUT --count 5000 --per-shard 250``, made into bench/.data/imagenet_like_250 when absent,
with bench/.venvs/data's Python if there is one). Steps, in one run:

1. moto as a child process on 127.0.0.1 (``LocalS3Server(in_process=False)``: it does not
   share this process's GIL), the shards uploaded to ``s3://bench/stream/``, a
   :class:`~turbofeed.testing.FaultProxy` without faults in front: every byte and GET the
   loader sends is counted there, per object;
2. the indexes, once, reported apart: ``turbofeed index s3://bench/stream/`` when the
   command exists; without it, one loader's construction, which downloads every shard
   to index it (each timed run then starts from a fresh node cache holding a copy of
   those cached indexes and no shard, as a node does once the dataset was indexed);
3. a warm-up epoch over the local files (imports, page cache, threads);
4. per repeat, one shuffled ``streaming=True`` epoch with a fresh node cache bounded at
   ``--cache-fraction`` of the dataset's bytes, then the same epoch over the local files.
   A watcher thread sums the sizes under the cache's ``objects/`` and ``tmp/`` folders
   every 20 ms (files counted once by inode, so a rename mid-scan is not counted twice).

Checked (goals of issue #17): every sample delivered exactly once; bytes fetched / dataset
bytes <= 1.15; GETs of shard objects / shards a small multiple; the cache's largest size
<= its bound + the largest shard; bytes fetched before the first batch / dataset bytes
<= 0.35; images/s streaming / local >= 0.6. Same transform (RandomResizedCrop(224) + flip,
uint8), batch, threads and seed on both sides. moto runs on the same cores as the loader:
the ratios, not the absolute rates, are the result.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BEGIN, END = "<!-- streaming:begin -->", "<!-- streaming:end -->"
BUCKET, PREFIX = "bench", "stream"
MiB = 1 << 20


def ensure_data(path: str, per_shard: int) -> list[str]:
    shards = sorted(glob.glob(os.path.join(path, "*.tar")))
    if not shards:
        data_python = os.path.join(HERE, ".venvs", "data", "bin", "python")
        python = data_python if os.path.exists(data_python) else sys.executable
        script = os.path.join(ROOT, "..", "shared", "bench", "make_imagenet_like.py")
        subprocess.run([python, script, path, "--count", "5000", "--per-shard", str(per_shard)], check=True)
        shards = sorted(glob.glob(os.path.join(path, "*.tar")))
    return shards


def sample_keys(shards: list[str]) -> set[str]:
    """``shard-000003.tar/00000750`` for every image of the local shards (the loader's keys)."""
    keys = set()
    for path in shards:
        with tarfile.open(path) as tar:
            keys.update(f"{os.path.basename(path)}/{m.name.rsplit('.', 1)[0]}" for m in tar if m.name.endswith(".jpg"))
    return keys


def short_key(key: str) -> str:
    """The last two parts of a key (``shard.tar/sample``), whatever prefix a source puts first."""
    return "/".join(key.rsplit("/", 2)[-2:])


class CacheWatcher:
    """Samples the bytes under ``<root>/objects`` and ``<root>/tmp`` every ``interval`` s
    in a thread of its own and keeps the largest; ``close()`` stops it."""

    def __init__(self, root: str, interval: float = 0.02) -> None:
        self.root, self.interval = root, interval
        self.peak = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cache-watcher", daemon=True)
        self._thread.start()

    def size(self) -> int:
        seen: dict[int, int] = {}
        for sub in ("tmp", "objects"):  # a .part renamed mid-scan is seen twice: same inode
            try:
                entries = list(os.scandir(os.path.join(self.root, sub)))
            except FileNotFoundError:
                continue
            for entry in entries:
                if entry.name.endswith(".lock"):
                    continue
                try:
                    seen[entry.inode()] = entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    pass
        return sum(seen.values())

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.size())
            self.samples += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.peak = max(self.peak, self.size())


def shard_traffic(traffic: dict, names: set[str]) -> tuple[int, int]:
    """(bytes, GETs) of the shard objects in one FaultProxy.traffic() snapshot."""
    rows = [v for k, v in traffic["by_object"].items() if k in names]
    return sum(r["bytes"] for r in rows), sum(r["gets"] for r in rows)


class Bench:
    def __init__(self, args: argparse.Namespace, shards: list[str], proxy, tmp: str) -> None:
        import turbofeed

        self.args, self.shards, self.proxy, self.tmp = args, shards, proxy, tmp
        self.turbofeed = turbofeed
        self.url = f"s3://{BUCKET}/{PREFIX}/"
        self.names = {f"{BUCKET}/{PREFIX}/{os.path.basename(p)}" for p in shards}
        self.sizes = [os.path.getsize(p) for p in shards]
        self.total = sum(self.sizes)
        self.bound = int(args.cache_fraction * self.total)
        self.keys = sample_keys(shards)
        self.indexed = False  # by `turbofeed index`, else by a first construction
        self.index_cache = os.path.join(tmp, "index-cache")

    def options(self) -> dict:
        T = self.turbofeed.transforms
        return dict(batch_size=self.args.batch_size, num_workers=self.args.workers, shuffle=True, seed=0,
                    on_error="raise", return_keys=True, transform=T.imagenet_train(self.args.image_size))

    def config(self):
        return self.turbofeed.S3Config(endpoint_url=self.proxy.endpoint, access_key_id="bench",
                                       secret_access_key="bench", cache_max_bytes=self.bound)

    def index(self) -> dict:
        """The dataset's indexes, made once into ``index_cache``: by ``turbofeed index`` when
        the command exists, else by one loader's construction. Its traffic and time."""
        probe = subprocess.run([sys.executable, "-m", "turbofeed", "index", "--help"], capture_output=True)
        self.indexed = probe.returncode == 0
        self.proxy.reset_traffic()
        started = time.perf_counter()
        if self.indexed:
            env = {**os.environ, "TURBOFEED_CACHE_DIR": self.index_cache}
            subprocess.run([sys.executable, "-m", "turbofeed", "index", self.url], check=True, env=env)
        else:
            data = self.turbofeed.Dataset(self.url, cache_dir=self.index_cache, storage=self.config())
            self.turbofeed.DataLoader(data, **self.options()).close()
        seconds = time.perf_counter() - started
        return {**self.proxy.reset_traffic(), "seconds": seconds,
                "how": "`turbofeed index`" if self.indexed else "a first construction (no `turbofeed index`)"}

    def local_epoch(self) -> dict:
        started = time.perf_counter()
        data = self.turbofeed.Dataset(self.args.data, cache_dir=os.path.join(self.tmp, "local"))
        loader = self.turbofeed.DataLoader(data, **self.options())
        count = sum(len(keys) for _, _, keys in loader)
        loader.close()
        return {"seconds": time.perf_counter() - started, "samples": count}

    def stream_epoch(self) -> dict:
        cache_dir = tempfile.mkdtemp(prefix="node-cache-", dir=self.tmp)
        # The cached indexes, no shard: a node's cache once the dataset was indexed.
        shutil.copytree(self.index_cache, cache_dir, dirs_exist_ok=True,
                        ignore=lambda folder, names: [n for n in names if folder == self.index_cache
                                                      and n in ("s3", "s3-indexing")])
        streaming = {} if self.args.streaming == "auto" else {"streaming": True}
        config = self.config()
        watcher = CacheWatcher(os.path.join(cache_dir, "s3"))
        self.proxy.reset_traffic()
        try:
            started = time.perf_counter()
            data = self.turbofeed.Dataset(self.url, cache_dir=cache_dir, storage=config, **streaming)
            loader = self.turbofeed.DataLoader(data, **self.options())
            built = time.perf_counter()
            construction = self.proxy.reset_traffic()
            keys: list[str] = []
            mixed: list[int] = []  # distinct shards of each full batch
            first = first_at = None
            for _, _, batch_keys in loader:
                if first is None:
                    first, first_at = self.proxy.traffic(), time.perf_counter()
                keys.extend(batch_keys)
                if len(batch_keys) == self.args.batch_size:
                    mixed.append(len({short_key(k).split("/")[0] for k in batch_keys}))
            ended = time.perf_counter()
            lay = loader.stream_layout
            overlap = lay.overlap if lay is not None else 0
            pieces = len(lay.pieces) if lay is not None and lay.pieces is not None else 0
            epoch = self.proxy.traffic()
            loader.close()
        finally:
            watcher.close()
            shutil.rmtree(cache_dir, ignore_errors=True)
        got = [short_key(k) for k in keys]
        return {"construction": construction, "first": first, "epoch": epoch, "keys": got,
                "build_s": built - started, "first_s": first_at - built, "iter_s": ended - built,
                "peak": watcher.peak, "watch_samples": watcher.samples,
                "shards_per_batch": statistics.mean(mixed) if mixed else 0.0, "overlap": overlap, "pieces": pieces}


def measure(b: Bench, run: dict) -> dict:
    """One streamed epoch's checks; bytes and GETs include its loader's construction."""
    built, epoch = run["construction"], run["epoch"]
    shard_bytes, shard_gets = (x + y for x, y in zip(shard_traffic(built, b.names), shard_traffic(epoch, b.names)))
    counts = Counter(run["keys"])
    return {"once": counts == Counter(b.keys), "delivered": len(run["keys"]),
            "repeated": sum(c - 1 for c in counts.values()), "missing": len(b.keys - set(counts)),
            "fetched": built["bytes"] + epoch["bytes"], "shard_bytes": shard_bytes, "shard_gets": shard_gets,
            "gets": built["gets"] + epoch["gets"], "first": built["bytes"] + run["first"]["bytes"],
            "first_s": run["first_s"], "peak": run["peak"], "watch_samples": run["watch_samples"]}


def report(b: Bench, runs: list[dict], locals_: list[dict], index: dict) -> tuple[list[str], dict]:
    """The table of checks, each at its worst over the repeats, and the numbers of the row."""
    per_run = [measure(b, r) for r in runs]

    def worst(name: str) -> dict:
        return max(per_run, key=lambda x: x[name])
    once = all(x["once"] for x in per_run)
    w_once = next((x for x in per_run if not x["once"]), per_run[0])
    w_fetched, w_gets, w_peak, w_first = worst("fetched"), worst("shard_gets"), worst("peak"), worst("first")
    largest, n, limit = max(b.sizes), len(b.shards), b.bound + max(b.sizes)
    # Images/s: from DataLoader(...) to the last batch, on both sides; median over repeats.
    stream_ips = len(b.keys) / statistics.median(r["build_s"] + r["iter_s"] for r in runs)
    local_ips = len(b.keys) / statistics.median(r["seconds"] for r in locals_)
    m = {"once": once, "fetched": w_fetched["fetched"] / b.total, "gets": w_gets["shard_gets"] / n,
         "peak": w_peak["peak"], "limit": limit, "first": w_first["first"] / b.total,
         "stream_ips": stream_ips, "local_ips": local_ips, "ratio": stream_ips / local_ips,
         "mixed": statistics.mean(r["shards_per_batch"] for r in runs)}
    rows = [
        ("every sample exactly once", f"{'yes' if once else 'no'} ({w_once['delivered']} delivered, "
         f"{w_once['repeated']} repeated, {w_once['missing']} missing of {len(b.keys)})", "exactly once", once),
        ("bytes fetched / dataset bytes", f"{m['fetched']:.3f} ({w_fetched['fetched'] / MiB:.0f} of "
         f"{b.total / MiB:.0f} MiB; shard objects {w_fetched['shard_bytes'] / MiB:.0f} MiB)", "<= 1.15",
         m["fetched"] <= 1.15),
        ("GETs of shard objects / shards", f"{m['gets']:.2f} ({w_gets['shard_gets']} GETs, {n} shards; "
         f"{w_gets['gets']} GETs in all)", "a small multiple (<= 8)", m["gets"] <= 8),
        ("largest cache size (objects + tmp)", f"{m['peak'] / MiB:.1f} MiB ({w_peak['watch_samples']} samples); "
         f"bound {b.bound / MiB:.1f} + largest shard {largest / MiB:.1f} = {limit / MiB:.1f} MiB",
         "<= bound + largest shard", m["peak"] <= limit),
        ("bytes before the first batch / dataset bytes", f"{m['first']:.3f} ({w_first['first'] / MiB:.1f} MiB, "
         f"first batch after {w_first['first_s']:.2f} s)", "<= 0.35", m["first"] <= 0.35),
        ("images/s streaming / local", f"{m['ratio']:.2f} ({stream_ips:.0f} vs {local_ips:.0f} img/s)",
         ">= 0.6", m["ratio"] >= 0.6),
        ("shards per batch (mean over full batches)", f"{m['mixed']:.2f} (overlap {runs[0]['overlap']}; "
         f"{n} shards, cache {b.bound / statistics.mean(b.sizes):.1f} shards)", "(#29: more is better)", True),
    ]
    table = [f"Worst of {len(runs)} streamed epoch(s); images/s: median.", "",
             "| check | measured | goal | |", "|---|---|---|---|"]
    table += [f"| {a} | {v} | {g} | {'met' if ok else 'NOT met'} |" for a, v, g, ok in rows]
    builds = ", ".join(f"{r['build_s']:.2f} s / {r['construction']['bytes'] / MiB:.1f} MiB" for r in runs)
    notes = [f"construction, counted above: {builds}",
             f"indexes made once by {index['how']}: {index['seconds']:.1f} s, {index['bytes'] / MiB:.1f} MiB, "
             f"{index['gets']} GETs (not counted above)"]
    return table + [""] + [f"- {x}" for x in notes], m


def write_row(path: str, header: list[str], row: str) -> None:
    """Append ``row`` to the table of the streaming section, creating the section if absent."""
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    if BEGIN not in text:
        text = text.rstrip() + "\n\n" + "\n".join([BEGIN, *header, row, END]) + "\n"
    else:
        head, rest = text.split(BEGIN, 1)
        body, tail = rest.split(END, 1)
        text = head + BEGIN + body.rstrip("\n") + "\n" + row + "\n" + END + tail
    with open(path, "w") as f:
        f.write(text)


def ab_overlap(bench: Bench, repeats: int) -> None:
    """#29: streamed epochs of whole shards over overlapping blocks (A: as before pieces;
    set through ``engine.layout.PIECE_MIN_BYTES``, so large that no shard is cut) and of
    pieces of shards (B: the default), interleaved A B A B ... after one streamed epoch not
    counted (a warm-up), each with a fresh node cache: shards per batch, images/s (from
    ``DataLoader(...)`` to the last batch) and the checks of :func:`measure`."""
    from turbofeed.engine import layout

    default = layout.PIECE_MIN_BYTES
    bench.stream_epoch()  # warm-up, not counted: the first streamed epoch of a run is much slower
    rows: dict[str, list[dict]] = {"A": [], "B": []}
    for r in range(repeats):
        for name, floor in (("A", 1 << 62), ("B", default)):
            layout.PIECE_MIN_BYTES = floor
            try:
                run = bench.stream_epoch()
            finally:
                layout.PIECE_MIN_BYTES = default
            m = measure(bench, run)
            ips = len(bench.keys) / (run["build_s"] + run["iter_s"])
            rows[name].append({"mixed": run["shards_per_batch"], "ips": ips, "overlap": run["overlap"],
                               "pieces": run["pieces"], **m})
            print(f"repeat {r} {name}: overlap {run['overlap']}, {run['pieces']} pieces, "
                  f"{run['shards_per_batch']:.2f} shards/batch, "
                  f"{ips:.0f} img/s, once {m['once']}, fetched/data {m['fetched'] / bench.total:.3f}, "
                  f"peak {m['peak'] / MiB:.1f} MiB (bound {bench.bound / MiB:.1f})", flush=True)
    print("\n| shuffle | overlap | pieces | shards per batch | img/s (median) | exactly once | fetched / data "
          "| peak cache MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, label in (("A", "whole shards, overlapping blocks (before pieces)"), ("B", "pieces of shards")):
        xs = rows[name]
        each = ", ".join(f"{x['ips']:.0f}" for x in xs)
        print(f"| {label} | {xs[0]['overlap']} | {xs[0]['pieces'] or '-'} | "
              f"{statistics.mean(x['mixed'] for x in xs):.2f} | "
              f"{statistics.median(x['ips'] for x in xs):.0f} ({each}) | "
              f"{'yes' if all(x['once'] for x in xs) else 'NO'} | "
              f"{max(x['fetched'] for x in xs) / bench.total:.3f} | {max(x['peak'] for x in xs) / MiB:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(HERE, ".data", "imagenet_like_250"))
    ap.add_argument("--per-shard", type=int, default=250, help="when the data is made here")
    ap.add_argument("--cache-fraction", type=float, default=0.3, help="node cache bound / dataset bytes")
    ap.add_argument("--repeats", type=int, default=1, help="streaming + local epoch pairs (median)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--streaming", choices=["on", "auto"], default="on",
                    help="on: streaming=True; auto: the loader's default (on when the data exceeds the bound)")
    ap.add_argument("--ab-overlap", action="store_true",
                    help="#29: per repeat, a streamed epoch of whole shards (overlapping blocks, as before "
                         "pieces) and one of pieces of shards (the default), interleaved; prints both")
    ap.add_argument("--write", action="store_true", help="append a row to bench/RESULTS.md")
    ap.add_argument("--results", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args()
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        del os.environ[name]  # only what this script configures

    from turbofeed.io.stores.urls import close_clients
    from turbofeed.testing import FaultProxy, LocalS3Server

    shards = ensure_data(args.data, args.per_shard)
    with tempfile.TemporaryDirectory() as tmp, LocalS3Server(in_process=False) as server, \
            FaultProxy(server.endpoint) as proxy:
        os.environ.update(AWS_ENDPOINT_URL=proxy.endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                          AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        import boto3

        s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        for path in shards:
            s3.upload_file(path, BUCKET, f"{PREFIX}/{os.path.basename(path)}")
        bench = Bench(args, shards, proxy, tmp)
        print(f"{len(shards)} shards, {bench.total / MiB:.0f} MiB, cache bound {bench.bound / MiB:.0f} MiB", flush=True)
        index = bench.index()
        print(f"indexes by {index['how']}: {index['seconds']:.1f} s, {index['bytes'] / MiB:.1f} MiB", flush=True)
        bench.local_epoch()  # warm-up
        if args.ab_overlap:
            ab_overlap(bench, args.repeats)
            close_clients()
            return
        runs, locals_ = [], []
        for r in range(args.repeats):
            runs.append(bench.stream_epoch())
            locals_.append(bench.local_epoch())
            print(f"repeat {r}: streaming {runs[-1]['build_s']:.2f} s build + {runs[-1]['iter_s']:.2f} s epoch, "
                  f"{runs[-1]['epoch']['bytes'] / MiB:.0f} MiB; local {locals_[-1]['seconds']:.2f} s", flush=True)
        close_clients()

    lines, m = report(bench, runs, locals_, index)
    print("\n".join(lines))
    command = ".venv/bin/python bench/streaming.py " + " ".join(
        a for a in sys.argv[1:] if a != "--write")
    header = [
        "## Streaming from s3:// (#17)",
        "",
        "`bench/streaming.py`: one shuffled `streaming=True` epoch over 20 tar shards of 250 ImageNet-like "
        "JPEGs from a local moto server (a child process) through a counting `FaultProxy`, node cache "
        "bounded at 30% of the data, against the same epoch from the local files in the same run "
        "(RandomResizedCrop(224) + flip, uint8, batch 64, 2 threads; both timed from `DataLoader(...)` to "
        "the last batch). The indexes are made once before (by `turbofeed index`, or by a first "
        "construction, which downloads every shard) and not counted; each timed run starts from a "
        "fresh node cache holding them and no shard. Bytes and GETs are counted at the "
        "proxy, construction included; the cache size is sampled every 20 ms. Goals: exactly once; "
        "fetched / data <= 1.15; "
        "cache <= bound + largest shard; before first batch <= 0.35 of data; streaming / local >= 0.6x.",
        "",
        "| date | command | cores | indexes by | exactly once | fetched / data | shard GETs / shards | "
        "peak cache / (bound + largest) | first batch / data | img/s streaming | img/s local | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    row = (f"| {time.strftime('%Y-%m-%d')} | `{command.strip()}` | {os.cpu_count()} | "
           f"{'`turbofeed index`' if bench.indexed else 'first construction'} | "
           f"{'yes' if m['once'] else 'NO'} | {m['fetched']:.3f} | "
           f"{m['gets']:.2f} | {m['peak'] / MiB:.0f} / {m['limit'] / MiB:.0f} MiB | {m['first']:.3f} | "
           f"{m['stream_ips']:.0f} | {m['local_ips']:.0f} | {m['ratio']:.2f}x |")
    print(f"\nPython {platform.python_version()}, moto {version('moto')}, turbofeed {version('turbofeed')}")
    print(row)
    if args.write:
        write_row(args.results, header, row)
        print(f"appended to {args.results}")


if __name__ == "__main__":
    main()
