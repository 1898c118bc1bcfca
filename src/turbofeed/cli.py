"""The ``turbofeed`` command: make-dataset, convert, inspect, bench, gds-status."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

import numpy as np

from .errors import TurbofeedError


def _default_dataset() -> str:
    from .io.tar import default_cache_dir

    return os.path.join(default_cache_dir(), "demo-imagenet-like")


def cmd_make_dataset(args: argparse.Namespace) -> int:
    from ._datagen import folder_to_shards, make_imagenet_like

    started = time.perf_counter()
    if args.from_folder:
        written = folder_to_shards(args.from_folder, args.out, per_shard=args.per_shard)
    else:
        written = make_imagenet_like(args.out, count=args.count, per_shard=args.per_shard,
                                     classes=args.classes, seed=args.seed, layout=args.layout)
    print(f"wrote {len(written)} {'shards' if args.layout == 'wds' or args.from_folder else 'class folders'}"
          f" to {args.out} in {time.perf_counter() - started:.1f} s")
    return 0


def _format_options(pairs: list[str] | None) -> dict | None:
    """``["images=pixels", "labels=none", "mmap=false"]`` -> format_options."""
    if not pairs:
        return None
    words = {"none": None, "true": True, "false": False}
    options = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"turbofeed: error: --option wants NAME=VALUE, got {pair!r}")
        options[name.strip()] = words.get(value.strip().lower(), value.strip())
    return options


def cmd_convert(args: argparse.Namespace) -> int:
    from ._convert import to_npy, to_tar

    started = time.perf_counter()
    options = _format_options(args.option)
    if args.to == "tar":
        shards = to_tar(args.src, args.dst, per_shard=args.per_shard, format=args.format,
                        format_options=options)
        print(f"{len(shards)} shards in {args.dst} ({time.perf_counter() - started:.1f} s)")
    else:
        path = to_npy(args.src, args.dst, size=args.size, workers=args.workers, format=args.format,
                      format_options=options)
        shape = np.load(path, mmap_mode="r").shape
        print(f"{path}: {shape[0]} images of {shape[1]}x{shape[2]} ({time.perf_counter() - started:.1f} s)")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from .decode import probe
    from .io import Dataset

    ds = Dataset(args.data)
    labels = ds.labels[ds.labels >= 0]
    per_class = Counter(labels.tolist())
    rng = np.random.default_rng(0)
    picks = rng.choice(ds.num_samples, size=min(args.probe, ds.num_samples), replace=False)
    sizes, formats, unreadable = [], Counter(), 0
    for gid in picks:
        try:
            data = ds.read(int(gid))
            info = probe(data)
        except (OSError, ValueError):
            unreadable += 1
            continue
        sizes.append((info.height, info.width, data.nbytes if isinstance(data, np.ndarray) else len(data)))
        formats[info.format] += 1
    arr = np.array(sizes, dtype=np.int64).reshape(-1, 3)
    report = {
        "samples": ds.num_samples,
        "sources": len(ds.sources),
        "classes": len(per_class),
        "class_names": ds.class_names[:10] if ds.class_names else None,
        "samples_per_class": {"min": min(per_class.values()), "max": max(per_class.values())}
        if per_class else None,
        "unlabelled": int((ds.labels < 0).sum()),
        "skipped_at_index": len(ds.problems),
        "damaged_shards": ds.damaged,
        "probed": len(picks),
        "unreadable_in_probe": unreadable,
        "formats": dict(formats),
        "height_median": int(np.median(arr[:, 0])) if len(arr) else None,
        "width_median": int(np.median(arr[:, 1])) if len(arr) else None,
        "kib_mean": round(float(arr[:, 2].mean()) / 1024, 1) if len(arr) else None,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, v in report.items():
            print(f"{k:>20}: {v}")
    return 0


def _transform_for(pipeline: str, size: int):
    from . import transforms

    return {
        "train": lambda: transforms.imagenet_train(size),
        "train-float": lambda: transforms.imagenet_train(size, normalize=True),
        "eval": lambda: transforms.imagenet_eval(size),
    }[pipeline]()


def cmd_bench(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    import turbofeed

    data = args.data
    if data is None:
        data = _default_dataset()
        if not os.path.isdir(data) or not any(n.endswith(".tar") for n in os.listdir(data)):
            print(f"no dataset given: making {args.count} ImageNet-like JPEGs in {data}")
            from ._datagen import make_imagenet_like

            make_imagenet_like(data, count=args.count, per_shard=max(1, args.count // 4))
    loader = turbofeed.DataLoader(data, batch_size=args.batch_size, num_workers=args.workers,
                                  shuffle=True, seed=0, transform=_transform_for(args.pipeline, args.size))
    print(f"{loader.num_samples} samples, {len(loader)} batches of {args.batch_size}, "
          f"{args.workers} workers, pipeline {args.pipeline}")
    rates = []
    for epoch in range(args.warmup + args.epochs):
        loader.set_epoch(epoch)
        timed = epoch >= args.warmup
        label = f"epoch {epoch}" + ("" if timed else " (warm-up)")
        started, images = time.perf_counter(), 0
        for batch, _ in tqdm(loader, desc=label, unit="batch", leave=False, file=sys.stderr, disable=None):
            images += len(batch)
        rate = images / (time.perf_counter() - started)
        print(f"{label}: {images} images, {rate:.0f} images/s")
        if timed:
            rates.append(rate)
    if rates:
        print(f"median {np.median(rates):.0f} images/s over {len(rates)} epoch(s)")
    print("stage profile (worker seconds):")
    print(loader.profile())
    bad = loader.stats.as_dict()
    if bad["errors"]:
        print(f"bad samples: {bad['errors']} (replaced {bad['replaced']}, skipped {bad['skipped']})")
    return 0


def cmd_gds_status(args: argparse.Namespace) -> int:
    """CUDA devices, KvikIO, cuFile/GDS, P2P and the effective GDS config, with reasons."""
    from .gds.status import format_status, probe

    status = probe(config_path=args.config)
    print(json.dumps(status.as_dict(), indent=2) if args.json else format_status(status))
    return 1 if status.config_error else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="turbofeed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    make = sub.add_parser("make-dataset", help="write ImageNet-like JPEG shards from real photos, "
                                               "or convert an ImageFolder into shards")
    make.add_argument("out", help="output folder")
    make.add_argument("--count", type=int, default=5000)
    make.add_argument("--per-shard", type=int, default=1000)
    make.add_argument("--classes", type=int, default=100)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--layout", choices=["wds", "folder"], default="wds")
    make.add_argument("--from-folder", metavar="DIR", help="convert this ImageFolder tree instead")
    make.set_defaults(func=cmd_make_dataset)

    convert = sub.add_parser("convert", help="convert between layouts: ImageFolder, Parquet, ... -> tar "
                                             "shards; any dataset -> fixed-size uint8 .npy (resumable)")
    convert.add_argument("src", help="dataset: shards, pattern, folder, .parquet, .h5, .zarr, .npy")
    convert.add_argument("dst", help="output folder (a rerun continues an unfinished conversion)")
    convert.add_argument("--to", choices=["tar", "npy"], required=True,
                         help="tar: encoded images into shards; npy: decoded, resized, centre-cropped pixels")
    convert.add_argument("--per-shard", type=int, default=1000, help="samples per tar shard")
    convert.add_argument("--size", type=int, default=224, help="--to npy: output height and width")
    convert.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="--to npy: decode threads")
    convert.add_argument("--format", choices=["tar", "folder", "hdf5", "zarr", "npy", "parquet"],
                         help="what SRC is, when its extension does not say")
    convert.add_argument("-o", "--option", action="append", metavar="NAME=VALUE",
                         help="a format option, e.g. -o images=pixels -o labels=none (see docs/formats.md)")
    convert.set_defaults(func=cmd_convert)

    inspect = sub.add_parser("inspect", help="counts, classes, image sizes of a dataset")
    inspect.add_argument("data", nargs="+", help="shards, pattern, or folder")
    inspect.add_argument("--probe", type=int, default=200, help="headers to read for sizes")
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(func=cmd_inspect)

    bench = sub.add_parser("bench", help="stream a dataset and print images/s")
    bench.add_argument("data", nargs="*", help="shards, pattern or folder (default: a generated demo set)")
    bench.add_argument("--count", type=int, default=2000, help="images in the generated demo set")
    bench.add_argument("--batch-size", type=int, default=64)
    bench.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    bench.add_argument("--epochs", type=int, default=2)
    bench.add_argument("--warmup", type=int, default=1)
    bench.add_argument("--size", type=int, default=224)
    bench.add_argument("--pipeline", choices=["train", "train-float", "eval"], default="train")
    bench.set_defaults(func=cmd_bench)

    gds = sub.add_parser("gds-status", help="what the GPUDirect-style client can use here, and why: CUDA, "
                                            "KvikIO, cuFile/GDS, P2P, effective config and its sources")
    gds.add_argument("--config", metavar="YAML", help="GDS config file (default: $TURBOFEED_GDS_CONFIG)")
    gds.add_argument("--json", action="store_true")
    gds.set_defaults(func=cmd_gds_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "data", None) == []:
        args.data = None
    try:
        return args.func(args)
    except TurbofeedError as exc:
        print(f"turbofeed: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("turbofeed: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
