#!/usr/bin/env python3
"""A DALI CPU pipeline fed by turbofeed.dali.reader against the same pipeline fed by DALI's
own fn.readers.webdataset: same tars, same decode (crop window only), resize and
crop_mirror_normalize, epochs interleaved A B B A ...; prints images/s and the ratio.

    python bench/dali_reader.py --data bench/.data/imagenet_like --shards 2 --rounds 3

Without ``--data`` it writes 1024 ImageNet-like images (4 shards, turbofeed._datagen) to
bench/.data/dali_reader first. Needs nvidia-dali-cuda120 (runs with device_id=None, no GPU).
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from nvidia.dali import fn, pipeline_def, types  # noqa: E402

import turbofeed.dali as tdali  # noqa: E402


@pipeline_def
def train(paths, source, read_threads):
    """The PEERS.md train pipeline: RandomResizedCrop(224) decode, antialiased resize, flip."""
    if source == "turbofeed":
        jpegs, labels = tdali.reader(paths, shuffle=True, seed=0, threads=read_threads)
    else:
        jpegs, labels = fn.readers.webdataset(paths=paths, ext=["jpg", "cls"], random_shuffle=True,
                                              initial_fill=1024, name="Reader")
    images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                           random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
    images = fn.resize(images, resize_x=224, resize_y=224, antialias=True)
    images = fn.crop_mirror_normalize(images, dtype=types.UINT8, output_layout="CHW", mirror=fn.random.coin_flip())
    return images, labels


def epoch(pipe, source: str, size: int, batch_size: int) -> tuple[int, float]:
    """(images delivered, seconds) of one epoch. DALI's reader wraps around (its epoch is
    ceil(size / batch) runs, the last padded: only ``size`` images count); turbofeed's
    raises StopIteration at the end, after a partial last batch."""
    t0 = time.perf_counter()
    n = 0
    if source == "turbofeed":
        while True:
            try:
                images, _ = pipe.run()
            except StopIteration:
                pipe.reset()
                break
            n += images.as_array().shape[0]
    else:
        for _ in range(-(-size // batch_size)):
            images, _ = pipe.run()
            n += min(images.as_array().shape[0], size - n)
    return n, time.perf_counter() - t0


def callback_cost(paths: list[str], batch_size: int, read_threads: int) -> float:
    """Microseconds per sample that turbofeed.dali.reader's callback itself takes (plan
    lookup, reads from the mapped tars, the label and key arrays), outside DALI: what it
    adds in front of the decode, on the thread that feeds DALI."""
    from types import SimpleNamespace

    from turbofeed.engine.choose import OpenedData

    source = OpenedData.open(paths, on_error="replace", cache_dir=None, format=None, format_options=None, storage=None,
                             classes=None)
    batches = tdali.DatasetBatches(source, batch_size=batch_size, shuffle=True, seed=0, shard_id=0, num_shards=1,
                                   threads=read_threads)
    best = float("inf")
    for e in range(3):
        t0, n = time.perf_counter(), 0
        for i in range(len(batches)):
            n += len(batches(SimpleNamespace(epoch_idx=e, iteration=i))[0])
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    batches.close()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="folder of KEY.jpg + KEY.cls shards (default: generate 1024 images)")
    ap.add_argument("--shards", type=int, default=0, help="use only the first N shards (0: all)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="DALI num_threads (both pipelines)")
    ap.add_argument("--read-threads", type=int, default=1, help="turbofeed.dali.reader's read threads")
    ap.add_argument("--rounds", type=int, default=3, help="timed epochs of each, interleaved")
    args = ap.parse_args()

    data = args.data
    if data is None:
        data = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".data", "dali_reader")
        if not glob.glob(os.path.join(data, "*.tar")):
            from turbofeed._datagen import make_imagenet_like

            make_imagenet_like(data, count=1024, per_shard=256, classes=100, seed=0, progress=False, force=True)
    paths = sorted(glob.glob(os.path.join(data, "*.tar")))
    if args.shards:
        paths = paths[:args.shards]
    pipes = {s: train(paths=paths, source=s, read_threads=args.read_threads, batch_size=args.batch_size,
                      num_threads=args.threads, device_id=None, seed=0, prefetch_queue_depth=2)
             for s in ("turbofeed", "dali")}
    for p in pipes.values():
        p.build()
    size = pipes["dali"].epoch_size("Reader")
    times: dict[str, list[float]] = {s: [] for s in pipes}
    for s, p in pipes.items():  # warm-up: index, page cache, DALI's buffers
        epoch(p, s, size, args.batch_size)
    for r in range(args.rounds):
        for s in (("turbofeed", "dali") if r % 2 == 0 else ("dali", "turbofeed")):
            n, seconds = epoch(pipes[s], s, size, args.batch_size)
            assert n == size, (s, n, size)
            times[s].append(n / seconds)
    print(f"{size} images in {len(paths)} shards, batch {args.batch_size}, DALI num_threads={args.threads}, "
          f"turbofeed read threads={args.read_threads}, {args.rounds} interleaved epochs each; "
          f"DALI {importlib.metadata.version('nvidia-dali-cuda120')}, Python {platform.python_version()}, "
          f"{os.cpu_count()} cores")
    for s, rates in times.items():
        print(f"  {s:10s} median {statistics.median(rates):7.0f} img/s  (min {min(rates):.0f}, max {max(rates):.0f})")
    ratio = statistics.median(times["turbofeed"]) / statistics.median(times["dali"])
    print(f"  turbofeed.dali.reader / fn.readers.webdataset = {ratio:.2f} "
          f"(per round: {', '.join(f'{a / b:.2f}' for a, b in zip(times['turbofeed'], times['dali']))})")
    print(f"  turbofeed.dali.reader's callback alone: {callback_cost(paths, args.batch_size, args.read_threads):.1f} "
          f"us per sample (best of 3 epochs, no decode)")


if __name__ == "__main__":
    main()
