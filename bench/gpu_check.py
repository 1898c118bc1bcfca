#!/usr/bin/env python3
"""The GPU check's benchmarks: one short run, batch 256, ImageNet-like tar shards.

Rows (each with a fixed duration or step count, so the whole run takes about 3 minutes):
  probe           what nvJPEG does with truncated, CMYK, PNG, empty and garbage input
                  (bench/gpu_probe.py)
  nvjpeg-raw      torchvision.io.decode_jpeg(list of CPU tensors, device="cuda"): batched
                  nvJPEG on bytes already in memory, nothing else (the ceiling)
  gpu-loader      turbofeed.DataLoader(gpu_decode=True): train and eval, uint8 and
                  normalised, as a fraction of the ceiling; each loader row times its
                  first epoch (which checks every JPEG's scan on the CPU) apart from the
                  later ones
  hybrid-loader   the same with hybrid=True, and the GPU's share of each batch
  cpu-loader      the CPU path with 1, 4, 8 and 16 threads (scaling against linear), on
                  shards in proportion to the threads
  resnet50        a training step (channels_last, bf16 autocast) fed by turbofeed, after
                  one unmeasured epoch, against the same model fed synthetic tensors
                  already on the GPU
  memory          device memory after each of three epochs of the GPU loader
  gds             GPUDirectClient.read_file_to_gpu through KvikIO (or staging) against a
                  plain read + copy
  switch          last, in a process of its own: device memory lost by switching
                  "cuda"/"cuda:0" 20 times (each switch re-creates torchvision's decoder; a
                  failed re-creation would poison every row after it in the same process)

Each GPU row (gpu-loader, hybrid, resnet50, memory) records the decoder that ran, the
images that fell back to the CPU and the decoder calls that failed; a row with any of
them, or without the GPU decoder, is marked invalid (``"valid": false`` and why, in the
JSON and the block): its figures may be CPU figures.

A row that fails is recorded with its error and the run goes on; the exit status is 1 if
any row failed or is invalid. ``--dry-run`` runs every row on the CPU (a CPU stand-in for the GPU
decoder, a tiny model, tiny sizes) so the script is exercised without a GPU.

    python bench/gpu_check.py --data DIR --out OUT [--dry-run] [--rows nvjpeg,loader,...]
    python bench/gpu_check.py --record OUT/gpu_block.md     # into bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from typing import Any, Callable

import numpy as np
import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.testing import CpuStandInDecoder  # the dry run's "GPU", as in the GPU tests

from gpu_report import block, goals, gpu_rows  # bench/, beside this script

ROWS = ("probe", "nvjpeg", "loader", "hybrid", "cpu", "resnet", "memory", "gds", "switch")


class Settings:
    """Sizes and durations: the GPU run's, or the dry run's tiny ones."""

    def __init__(self, dry_run: bool, batch_size: int | None, seconds: float | None) -> None:
        self.dry_run = dry_run
        self.device = "cpu" if dry_run else "cuda"
        self.batch = batch_size or (8 if dry_run else 256)
        self.size = 32 if dry_run else 224
        self.seconds = seconds if seconds is not None else (0.3 if dry_run else 6.0)
        self.threads = (1, 2) if dry_run else (1, 4, 8, 16)
        self.workers = 2 if dry_run else min(16, os.cpu_count() or 16)
        self.steps = 2 if dry_run else 25
        self.gds_bytes = (8 if dry_run else 256) << 20


def sync(s: Settings) -> None:
    if not s.dry_run:
        torch.cuda.synchronize()


def gpu_decode(s: Settings) -> Any:
    return CpuStandInDecoder() if s.dry_run else True


def gpu_record(loader: Any) -> dict:
    """Which decoder a GPU row's loader used, how many images fell back to the CPU
    (``stats.errors["gpu_fallback"]``) and which decoder calls failed, by kind; the row
    is valid only when the GPU decoder ran, nothing fell back and no call failed (the
    benchmark data holds no CMYK): otherwise its figures may be CPU figures."""
    decoder = getattr(loader, "_gpu_decoder", None) or getattr(loader, "decoder", None)
    fallback = loader.stats.errors.get("gpu_fallback", 0)
    failures = decoder.failures.as_dict() if hasattr(decoder, "failures") else {}
    why = []
    if decoder is None:
        why.append("no GPU decoder: the CPU path ran")
    if fallback:
        why.append(f"{fallback} fell back to the CPU")
    if failures:
        why.append(f"{sum(failures.values())} decoder calls failed ({'; '.join(failures)[:200]})")
    out = {"decoder": getattr(decoder, "description", None if decoder is None else type(decoder).__name__),
           "gpu_fallback": fallback, "decoder_failures": failures, "valid": not why}
    if why:
        out["invalid"] = "; ".join(why)
    return out


def loader_rate(s: Settings, shards: list[str], seconds: float, **kwargs: Any) -> dict:
    """A DataLoader's images/s, its first epoch apart from the later ones.

    The first epoch checks each JPEG's whole scan on the CPU (about 0.85 of a CPU decode
    per image, gpu-review S5; the samples are then known intact), later epochs do not, so
    one window over both would be neither figure. ``epoch1`` is the first epoch whole,
    timed from its first batch (start-up left out) to its end; ``images_per_s`` (what
    the goals read) is the later epochs', over ``seconds``."""
    kwargs.setdefault("num_workers", s.workers)
    loader = turbofeed.DataLoader(shards, batch_size=s.batch, shuffle=True, drop_last=True, **kwargs)
    try:
        images, started = 0, 0.0
        for i, (x, _) in enumerate(loader):
            if i == 0:
                sync(s)
                started = time.perf_counter()
                continue
            images += len(x)
        sync(s)
        elapsed = time.perf_counter() - started
        epoch1 = {"images_per_s": images / elapsed if images else None, "images": images, "seconds": elapsed}
        images, started = 0, time.perf_counter()
        while True:
            for x, _ in loader:
                images += len(x)
                if time.perf_counter() - started >= seconds:
                    sync(s)
                    elapsed = time.perf_counter() - started
                    out = {"images_per_s": images / elapsed, "images": images, "seconds": elapsed,
                           "epoch1": epoch1}
                    if kwargs.get("hybrid"):
                        out["hybrid_share"] = loader.hybrid_share
                    if kwargs.get("gpu_decode"):
                        out.update(gpu_record(loader))
                    return out
    finally:
        loader.close()


def read_jpegs(shards: list[str], limit: int) -> list[bytes]:
    datas: list[bytes] = []
    for shard in shards:
        with tarfile.open(shard) as tar:
            for m in tar.getmembers():
                if m.name.endswith(".jpg") and len(datas) < limit:
                    datas.append(tar.extractfile(m).read())
    return datas


def timed_loop(step: Callable[[], int], seconds: float, s: Settings, min_iters: int = 3) -> dict:
    """Run ``step`` (returns items done) once to warm up, then for ``seconds`` (at least
    ``min_iters`` times); items/s with the device synchronised at both ends."""
    step()
    sync(s)
    items, iters, started = 0, 0, time.perf_counter()
    while iters < min_iters or time.perf_counter() - started < seconds:
        items += step()
        iters += 1
    sync(s)
    elapsed = time.perf_counter() - started
    return {"images_per_s": items / elapsed, "images": items, "seconds": elapsed}


# ----------------------------------------------------------------------------- the rows

def row_probe(s: Settings, shards: list[str], results: dict) -> dict:
    from gpu_probe import probe

    return probe(read_jpegs(shards, 1)[0], s.dry_run, CpuStandInDecoder() if s.dry_run else None)


def row_switch(s: Settings, shards: list[str], results: dict) -> dict:
    """bench/gpu_probe.py --switch in a child process: what it prints, or its error."""
    command = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_probe.py"),
               "--switch", "--data", os.path.dirname(shards[0])] + (["--dry-run"] if s.dry_run else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"gpu_probe.py --switch exit {done.returncode}: {done.stderr.strip()[-400:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if out["process"] == os.getpid():
        raise RuntimeError("the switch probe ran in the benchmark's own process")
    return out


def row_nvjpeg(s: Settings, shards: list[str], results: dict) -> dict:
    datas = read_jpegs(shards, 8 * s.batch)
    batches = [datas[i:i + s.batch] for i in range(0, len(datas) - s.batch + 1, s.batch)]
    state = {"i": 0}
    if s.dry_run:
        decoder = CpuStandInDecoder()

        def step() -> int:
            state["i"] += 1
            return len(decoder.decode(batches[state["i"] % len(batches)]))
        backend = "CPU stand-in (turbofeed.decode.decode, one thread)"
    else:
        from torchvision.io import ImageReadMode, decode_jpeg

        tensors = [[torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in b] for b in batches]
        # the device as GpuDecoder names it: torchvision re-creates its decoder when the name changes
        device = f"cuda:{torch.cuda.current_device()}"

        def step() -> int:
            state["i"] += 1
            return len(decode_jpeg(tensors[state["i"] % len(tensors)], mode=ImageReadMode.RGB, device=device))
        backend = "torchvision.io.decode_jpeg (batched nvJPEG)"
    out = timed_loop(step, s.seconds, s)
    out["backend"] = backend
    return out


def row_loader(s: Settings, shards: list[str], results: dict) -> dict:
    out = {}
    for pipeline in ("train", "eval"):
        for normalize in (False, True):
            preset = T.imagenet_train if pipeline == "train" else T.imagenet_eval
            name = f"{pipeline}-{'float' if normalize else 'uint8'}"
            out[name] = loader_rate(s, shards, s.seconds, transform=preset(s.size, normalize=normalize),
                                    gpu_decode=gpu_decode(s), device=None if s.dry_run else "cuda")
            ceiling = results.get("nvjpeg", {}).get("images_per_s")
            if ceiling:
                out[name]["of_ceiling"] = out[name]["images_per_s"] / ceiling
    return out


def row_hybrid(s: Settings, shards: list[str], results: dict) -> dict:
    out = loader_rate(s, shards, s.seconds, transform=T.imagenet_train(s.size), gpu_decode=gpu_decode(s),
                      hybrid=True, device=None if s.dry_run else "cuda")
    gpu = results.get("loader", {}).get("train-uint8", {}).get("images_per_s")
    if gpu:
        out["of_gpu_loader"] = out["images_per_s"] / gpu
    return out


def row_cpu(s: Settings, shards: list[str], results: dict) -> dict:
    out: dict[str, Any] = {}
    for threads in s.threads:
        # data in proportion to the threads: each row's first epoch takes about as long
        # (one thread's first epoch of all 8192 images would take 20 s of the window)
        part = shards[:max(1, len(shards) * threads // max(s.threads))]
        out[str(threads)] = loader_rate(s, part, s.seconds, transform=T.imagenet_train(s.size),
                                        num_workers=threads)
        out[str(threads)]["shards"] = len(part)
    one = out[str(s.threads[0])]["images_per_s"]
    for threads in s.threads:
        out[str(threads)]["of_linear"] = out[str(threads)]["images_per_s"] / (one * threads)
    return out


def _model(s: Settings):
    if s.dry_run:
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 1000))
    import torchvision

    return torchvision.models.resnet50()


def row_resnet(s: Settings, shards: list[str], results: dict) -> dict:
    device = torch.device(s.device)
    model = _model(s).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(x: torch.Tensor, y: torch.Tensor) -> int:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return len(x)

    x = torch.randn(s.batch, 3, s.size, s.size, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (s.batch,), device=device)
    for _ in range(3):
        train_step(x, y)
    synthetic = timed_loop(lambda: train_step(x, y), 0.0, s, min_iters=s.steps)

    loader = turbofeed.DataLoader(shards, batch_size=s.batch, num_workers=s.workers, shuffle=True, drop_last=True,
                                  transform=T.imagenet_train(s.size, normalize=True), gpu_decode=gpu_decode(s),
                                  device=None if s.dry_run else "cuda", channels_last=True)
    try:
        def batches():
            while True:
                yield from loader
        it = batches()
        for _ in loader:  # the first epoch, unmeasured: it checks each JPEG's scan on the CPU
            pass

        def fed_step() -> int:
            images, labels = next(it)
            return train_step(images, labels.to(device, non_blocking=True) % 1000)
        fed = timed_loop(fed_step, 0.0, s, min_iters=s.steps)
        fed.update(gpu_record(loader))
    finally:
        loader.close()
    model_name = "tiny CNN (dry run)" if s.dry_run else "torchvision resnet50"
    return {"model": model_name, "synthetic": synthetic, "turbofeed": fed,
            "of_synthetic": fed["images_per_s"] / synthetic["images_per_s"]}


def _memory_now(s: Settings) -> dict:
    if s.dry_run:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return {"host_rss_mib": rss / 2**20}
    free, total = torch.cuda.mem_get_info()
    return {"allocated_mib": torch.cuda.memory_allocated() / 2**20,
            "peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20,
            "reserved_mib": torch.cuda.memory_reserved() / 2**20,
            "device_used_mib": (total - free) / 2**20}


def row_memory(s: Settings, shards: list[str], results: dict) -> dict:
    loader = turbofeed.DataLoader(shards[:2] if s.dry_run else shards[:4], batch_size=s.batch, num_workers=s.workers, shuffle=True,
                                  drop_last=True, transform=T.imagenet_train(s.size, normalize=True),
                                  gpu_decode=gpu_decode(s), device=None if s.dry_run else "cuda")
    epochs = []
    try:
        for _ in range(3):
            if not s.dry_run:
                torch.cuda.reset_peak_memory_stats()
            n = sum(len(x) for x, _ in loader)
            sync(s)
            epochs.append({"images": n, **_memory_now(s)})
        record = gpu_record(loader)
    finally:
        loader.close()
    key = "host_rss_mib" if s.dry_run else "device_used_mib"
    out: dict[str, Any] = {"epochs": epochs, "growth_mib": epochs[-1][key] - epochs[0][key], **record}
    if not s.dry_run:
        out["peak_growth_mib"] = epochs[-1]["peak_allocated_mib"] - epochs[0]["peak_allocated_mib"]
    return out


def row_gds(s: Settings, shards: list[str], results: dict, work: str) -> dict:
    from turbofeed.gds import GDSConfig, GPUDirectClient

    path = os.path.join(work, "gds-read.bin")
    if not os.path.exists(path) or os.path.getsize(path) != s.gds_bytes:
        with open(path, "wb") as f:
            f.write(np.random.default_rng(0).bytes(s.gds_bytes))
    if s.dry_run:
        dst: Any = np.empty(s.gds_bytes, np.uint8)
    else:
        dst = torch.empty(s.gds_bytes, dtype=torch.uint8, device="cuda")
    out: dict[str, Any] = {"bytes": s.gds_bytes}
    repeats = 3 if s.dry_run else 5

    def gbps(fn: Callable[[], Any]) -> float:
        fn()
        sync(s)
        started = time.perf_counter()
        for _ in range(repeats):
            fn()
        sync(s)
        return s.gds_bytes * repeats / (time.perf_counter() - started) / 1e9

    for name, enabled in (("kvikio", True), ("staged", False)):
        with GPUDirectClient(config=GDSConfig(enabled=enabled)) as client:
            method = client.file_method(dst)
            out[name] = {"method": method, "gb_per_s": gbps(lambda: client.read_file_to_gpu(path, dst))}

    def plain() -> None:
        with open(path, "rb") as f:
            data = f.read()
        if s.dry_run:
            dst[:] = np.frombuffer(data, np.uint8)
        else:
            dst.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8).to("cuda"))
    out["plain"] = {"method": "open().read() + copy", "gb_per_s": gbps(plain)}
    out["kvikio_of_plain"] = out["kvikio"]["gb_per_s"] / out["plain"]["gb_per_s"]
    return out


def environment(dry_run: bool) -> dict:
    env = {"torch": torch.__version__, "cuda": torch.version.cuda or "none", "cpus": os.cpu_count(),
           "python": sys.version.split()[0], "turbofeed": turbofeed.__version__}
    env["device"] = "CPU (dry run)" if dry_run else torch.cuda.get_device_name()
    try:
        import torchvision
        env["torchvision"] = torchvision.__version__
    except ImportError:
        env["torchvision"] = "not installed"
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="folder of shard-*.tar")
    ap.add_argument("--out", help="folder for gpu_results.json and gpu_block.md")
    ap.add_argument("--work", default=None, help="scratch folder (the GDS file); default: a temporary one")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}")
    ap.add_argument("--dry-run", action="store_true", help="everything on the CPU, tiny sizes")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=None, help="per timed row (default 6, dry run 0.3)")
    ap.add_argument("--record", metavar="BLOCK", help="write this gpu_block.md into bench/RESULTS.md and exit")
    args = ap.parse_args()
    if args.record:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from _results import write_block

        write_block(os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"), open(args.record).read())
        return 0
    if not (args.data and args.out):
        ap.error("--data and --out are needed")
    s = Settings(args.dry_run, args.batch_size, args.seconds)
    if not s.dry_run and not torch.cuda.is_available():
        print("gpu_check.py: no CUDA device visible to torch (use --dry-run on a CPU machine)", file=sys.stderr)
        return 2
    shards = sorted(glob.glob(os.path.join(args.data, "*.tar")))
    if not shards:
        print(f"gpu_check.py: no shard-*.tar in {args.data}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="turbofeed-gpu-check-")
    os.makedirs(work, exist_ok=True)
    images = sum(1 for sh in shards for m in tarfile.open(sh).getmembers() if m.name.endswith(".jpg"))
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "dry_run": s.dry_run, "batch": s.batch,
                              "size": s.size, "seconds": s.seconds, "images": images,
                              "env": environment(s.dry_run), "results": {}}
    print(f"gpu_check.py: {report['env']}, {images} images in {len(shards)} shards", flush=True)
    failed = []
    asked = [r for r in args.rows.split(",") if r]
    # in ROWS' order whatever the order asked: the switch probe last
    for name in sorted(asked, key=lambda r: ROWS.index(r) if r in ROWS else -1):
        if name not in ROWS:
            print(f"gpu_check.py: unknown row {name!r} (rows: {', '.join(ROWS)})", file=sys.stderr)
            failed.append(name)
            continue
        started = time.perf_counter()
        try:
            fn = globals()[f"row_{name}"]
            result = fn(s, shards, report["results"], work) if name == "gds" else fn(s, shards, report["results"])
        except Exception as exc:  # one row's failure must not cost the others: record it, go on
            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {exc}".replace("\n", " ")}
            failed.append(name)
        report["results"][name] = result
        print(f"gpu_check.py: {name} ({time.perf_counter() - started:.1f} s): {json.dumps(result, default=str)}",
              flush=True)
        with open(os.path.join(args.out, "gpu_results.json"), "w") as f:  # after every row: a kill keeps them
            json.dump(report, f, indent=2, default=str)
    report["failed"] = failed
    report["invalid"] = {name: row["invalid"] for name, row in gpu_rows(report["results"]) if not row["valid"]}
    report["goals"] = [{"goal": g, "measured": m, "met": ok} for g, m, ok in goals(report["results"])]
    with open(os.path.join(args.out, "gpu_results.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    text = block(report)
    with open(os.path.join(args.out, "gpu_block.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    if failed:
        print(f"gpu_check.py: rows that failed: {', '.join(failed)}", file=sys.stderr)
    for name, why in report["invalid"].items():
        print(f"gpu_check.py: INVALID {name}: {why}", file=sys.stderr)
    return 1 if failed or report["invalid"] else 0


if __name__ == "__main__":
    sys.exit(main())
