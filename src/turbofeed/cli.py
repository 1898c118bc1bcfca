"""The turbofeed command: make-dataset, convert, index, inspect, bench, gds-status, doctor.

Every failure ends as one ``turbofeed: error: ...`` line on stderr with exit status 2
(130 after Ctrl-C), never a traceback: see :func:`main`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from collections import Counter
from typing import Any

import numpy as np

from . import __version__
from ._cli_args import (HelpFormatter, Parser, describe, existing_folder, fail, name_value, non_negative,
                        plot_file, positive)
from .errors import TurbofeedError

DESCRIPTION = ("Make, convert, inspect and benchmark image datasets for turbofeed: tar shards, "
               "ImageFolder trees, Parquet, HDF5, Zarr and .npy.")
EPILOG = ("Errors are one line on stderr with exit status 2; set TURBOFEED_TRACEBACK=1 to see a "
          "traceback as well. Tar indexes and the demo set are cached in $TURBOFEED_CACHE_DIR "
          "(default ~/.cache/turbofeed).")


def _demo_dataset(count: int) -> str:
    """The bench demo set of ``count`` images, made once into the cache.

    One folder per count, so ``--count`` is honoured; written beside its final name and
    renamed when complete, so an interrupted run never leaves a half set that a later run
    would take for the real thing.
    """
    from ._datagen import make_imagenet_like
    from .io import default_cache_dir

    path = os.path.join(default_cache_dir(), f"demo-imagenet-like-{count}")
    if os.path.isdir(path):
        return path
    print(f"no dataset given: making {count} ImageNet-like JPEGs in {path}")
    partial = f"{path}.partial-{os.getpid()}"
    try:
        # force: a folder left by a killed run that had this pid is ours to replace
        make_imagenet_like(partial, count=count, per_shard=max(1, count // 4), force=True)
        os.rename(partial, path)
    except OSError:
        if not os.path.isdir(path):  # else another bench finished the same set first: use it
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return path


def cmd_make_dataset(args: argparse.Namespace) -> int:
    from ._datagen import folder_to_shards, make_imagenet_like

    started = time.perf_counter()
    if args.from_folder:
        written = folder_to_shards(args.from_folder, args.out, per_shard=args.per_shard, force=args.force)
    else:
        written = make_imagenet_like(args.out, count=args.count, per_shard=args.per_shard,
                                     classes=args.classes, seed=args.seed, layout=args.layout, force=args.force)
    print(f"wrote {len(written)} {'shards' if args.layout == 'wds' or args.from_folder else 'class folders'}"
          f" to {args.out} in {time.perf_counter() - started:.1f} s")
    return 0


def _format_options(pairs: list[tuple[str, str]] | None) -> dict | None:
    """``[("images", "pixels"), ("labels", "none")]`` -> format_options (none/true/false as Python)."""
    if not pairs:
        return None
    words = {"none": None, "true": True, "false": False}
    return {name: words.get(value.lower(), value) for name, value in pairs}


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


def cmd_index(args: argparse.Namespace) -> int:
    from ._index_cli import cmd_index as run  # the dataset index: see io/dsindex

    return run(args)


def cmd_inspect(args: argparse.Namespace) -> int:
    from .decode import probe
    from .io import IndexedDataset

    ds = IndexedDataset(args.data)
    labels = ds.labels[ds.labels >= 0]
    per_class = Counter(labels.tolist())
    rng = np.random.default_rng(0)
    picks = rng.choice(ds.num_samples, size=min(args.probe, ds.num_samples), replace=False)
    sizes: list[tuple[int, int, int]] = []
    formats: Counter[str] = Counter()
    unreadable = 0
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
        "dataset_index": None if ds.index is None else ds.index.path if ds.index.in_memory else ds.index.origin,
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
    from ._deps import tqdm

    import turbofeed

    if args.plot:
        from . import _plot
        from .engine.timeline import Timeline

        _plot.require()  # a missing matplotlib fails now, not after the benchmark
    data = args.data or _demo_dataset(args.count)
    if not args.plot and importlib.util.find_spec("torch") is None:  # the demo's core-only .venv
        from . import _bench_numpy

        return _bench_numpy.run(args, data, _transform_for(args.pipeline, args.size))
    loader = turbofeed.DataLoader(data, batch_size=args.batch_size, num_workers=args.workers,
                                  shuffle=True, seed=0, transform=_transform_for(args.pipeline, args.size))
    print(f"{loader.num_samples} samples, {len(loader)} batches of {args.batch_size}, "
          f"{loader.num_threads} workers, pipeline {args.pipeline}")
    rates = []
    for epoch in range(args.warmup + args.epochs):
        loader.set_epoch(epoch)
        timed = epoch >= args.warmup
        if args.plot and epoch == args.warmup:  # record the timed epochs only
            loader.stats.timeline = Timeline()
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
    print("stage profile (seconds in the worker threads; then the consumer's wait):")
    print(loader.profile())
    bad = loader.stats.as_dict()
    if bad["errors"]:
        print(f"bad samples: {bad['errors']} (replaced {bad['replaced']}, skipped {bad['skipped']})")
    timeline = loader.stats.timeline
    if args.plot and timeline is not None:
        found = _plot.plot_timeline(timeline.spans(), args.plot, note=timeline.note(),
                                    images_per_s=float(np.median(rates)) if rates else None)
        print(f"timeline: {found}")
        print(f"wrote {args.plot}")
    return 0


def cmd_gds_status(args: argparse.Namespace) -> int:
    """CUDA devices, KvikIO, cuFile/GDS, P2P and the effective GDS config, with reasons."""
    from .gds.status import format_status, probe

    status = probe(config_path=args.config)
    print(json.dumps(status.as_dict(), indent=2) if args.json else format_status(status))
    return 1 if status.config_error else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Which fast paths are on here (native decoder, GPU decoder, KvikIO, obstore), and why not."""
    from ._doctor import collect, render  # lazily: it probes optional libraries

    report = collect()
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    common: dict[str, Any] = {"formatter_class": HelpFormatter}
    parser = Parser(prog="turbofeed", description=DESCRIPTION, epilog=EPILOG, **common)
    parser.add_argument("--version", action="version", version=f"turbofeed {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    make = sub.add_parser(
        "make-dataset", help="write ImageNet-like JPEG shards from real photos, or convert an ImageFolder "
        "into shards", description="Write ImageNet-like JPEGs (from the public-domain photos shipped "
        "with turbofeed) as tar shards or an ImageFolder tree, or convert an ImageFolder tree into "
        "shards. OUT must be empty or absent: a second run into a used folder is refused, since "
        "the first run's extra shards would silently join the new dataset; --force replaces the "
        "output of an earlier make-dataset (never other files).", **common)
    make.add_argument("out", help="output folder (created; must be empty unless --force)")
    make.add_argument("--count", type=positive, metavar="N", default=5000, help="images to write")
    make.add_argument("--per-shard", type=positive, metavar="N", default=1000, help="images per tar shard")
    make.add_argument("--classes", type=positive, metavar="N", default=100,
                      help="labels 0..N-1, drawn at random")
    make.add_argument("--seed", type=non_negative, metavar="N", default=0,
                      help="the same seed writes the same bytes")
    make.add_argument("--layout", choices=["wds", "folder"], default="wds",
                      help="wds: tar shards of KEY.jpg + KEY.cls; folder: classNNNN/KEY.jpg")
    make.add_argument("--from-folder", metavar="DIR", type=existing_folder,
                      help="convert this ImageFolder tree instead (--count, --classes, --seed and "
                           "--layout are ignored) (default: generate images)")
    make.add_argument("--force", action="store_true",
                      help="delete the shards and class folders an earlier make-dataset left in OUT first")
    make.set_defaults(func=cmd_make_dataset)

    convert = sub.add_parser("convert", help="convert between layouts: ImageFolder, Parquet, ... -> tar "
                                             "shards; any dataset -> fixed-size uint8 .npy (resumable)", **common)
    convert.add_argument("src", help="dataset: shards, pattern, folder, .parquet, .h5, .zarr, .npy")
    convert.add_argument("dst", help="output folder (a rerun continues an unfinished conversion)")
    convert.add_argument("--to", choices=["tar", "npy"], required=True,
                         help="tar: encoded images into shards; npy: decoded, resized, centre-cropped pixels")
    convert.add_argument("--per-shard", type=positive, metavar="N", default=1000,
                         help="--to tar: samples per shard")
    convert.add_argument("--size", type=positive, metavar="N", default=224,
                         help="--to npy: output height and width")
    convert.add_argument("--workers", type=positive, metavar="N", default=os.cpu_count() or 2,
                         help="--to npy: decode threads (default: the CPU count, %(default)s here)")
    convert.add_argument("--format", choices=["tar", "folder", "hdf5", "zarr", "npy", "parquet", "tfrecord"],
                         help="what SRC is (default: from its extension, or a folder's contents)")
    convert.add_argument("-o", "--option", action="append", metavar="NAME=VALUE", type=name_value,
                         help="a format option, repeatable, e.g. -o images=pixels -o labels=none "
                              "(see docs/formats.md) (default: none)")
    convert.set_defaults(func=cmd_convert)

    index = sub.add_parser(
        "index", help="write the dataset index: one file loaders start from instead of indexing every shard",
        description="Index every tar shard of DATA (local, s3://, gs://, az:// or https://) into one compact file (counts, keys, "
        "labels, member offsets; a few tens of bytes per sample) that loaders map at start. Loaders look "
        "for it next to the data, then in the index cache; a shard changed since is indexed on its own, "
        "with a warning to run this again.", **common)
    index.add_argument("data", nargs="+", help="tar shards: folder, pattern, list, s3:// gs:// az:// prefix or https:// pattern")
    index.add_argument("--out", metavar="PATH", help="write it here, a file or s3:// gs:// az:// URL (default: "
                       "DATA/turbofeed.index for a writable folder or an s3:// gs:// az:// prefix, else the index cache; "
                       "elsewhere, pass turbofeed.Dataset(..., index=PATH) to the loader)")
    index.add_argument("--threads", type=positive, metavar="N", default=None,
                       help="shards indexed at once (default: local shards, the cores this process may use, "
                            "8 to 64; remote shards, 8)")
    index.set_defaults(func=cmd_index)

    inspect = sub.add_parser("inspect", help="counts, classes, image sizes of a dataset", **common)
    inspect.add_argument("data", nargs="+", help="shards, pattern, or folder")
    inspect.add_argument("--probe", type=non_negative, metavar="N", default=200,
                         help="image headers to read for sizes and formats (0: none)")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.set_defaults(func=cmd_inspect)

    bench = sub.add_parser("bench", help="stream a dataset and print images/s", **common)
    bench.add_argument("data", nargs="*", help="shards, pattern or folder (default: a demo set of --count "
                                               "images, made once in $TURBOFEED_CACHE_DIR)")
    bench.add_argument("--count", type=positive, metavar="N", default=2000,
                       help="images in the demo set (no DATA)")
    bench.add_argument("--batch-size", type=positive, metavar="N", default=64, help="images per batch")
    bench.add_argument("--workers", type=positive, metavar="N", default=None,
                       help="decode threads (default: the cores this process may use, as num_workers=None; "
                            "`turbofeed doctor` shows how many)")
    bench.add_argument("--epochs", type=positive, metavar="N", default=2, help="timed epochs")
    bench.add_argument("--warmup", type=non_negative, metavar="N", default=1,
                       help="untimed epochs first (page cache, indexes)")
    bench.add_argument("--size", type=positive, metavar="N", default=224, help="output height and width")
    bench.add_argument("--pipeline", choices=["train", "train-float", "eval"], default="train",
                       help="train: random resized crop + flip, uint8; train-float: the same, normalised "
                            "float32; eval: resize + centre crop, uint8")
    bench.add_argument("--plot", metavar="FILE.png", type=plot_file,
                       help="also draw the timed epochs' timeline into this .png (or .svg, .pdf): worker "
                            "threads busy per stage or idle, the consumer waiting or running your code, "
                            "and the bottleneck in words; needs turbofeed[plot] (default: no picture)")
    bench.set_defaults(func=cmd_bench)

    gds = sub.add_parser("gds-status", help="what the GPUDirect-style client can use here, and why: CUDA, "
                                            "KvikIO, cuFile/GDS, P2P, effective config and its sources", **common)
    gds.add_argument("--config", metavar="YAML", help="GDS config file (default: $TURBOFEED_GDS_CONFIG)")
    gds.add_argument("--json", action="store_true", help="print the status as JSON")
    gds.set_defaults(func=cmd_gds_status)

    doctor = sub.add_parser("doctor", help="which fast paths are on here (native decoder, GPU decoder, "
                                           "KvikIO, obstore), and why not", **common)
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (the ``turbofeed`` script exits with it).

    0: done. 2: any error, as one ``turbofeed: error:`` line (usage, TurbofeedError,
    ValueError, OSError, and unexpected exceptions, which also say how to see the
    traceback). 130: Ctrl-C. 141: stdout was closed early (``| head``), as a shell
    reports SIGPIPE; nothing is printed then. ``gds-status`` returns 1 when its config
    is broken: a report, not a failure to run.
    """
    try:
        args = build_parser().parse_args(argv)
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe surfaces here, where it is handled, not at exit
        return status
    except BrokenPipeError:
        # The Python docs' recipe (signal module, "Note on SIGPIPE"): point stdout at
        # devnull so the interpreter's last flush does not raise again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        fail("interrupted")
        return 130
    except Exception as exc:
        if os.environ.get("TURBOFEED_TRACEBACK", "") not in ("", "0"):
            raise
        if isinstance(exc, (TurbofeedError, ValueError, OSError)):
            fail(describe(exc))
        else:  # a bug: still one line, with the type to report it by
            fail(f"internal error: {type(exc).__name__}: {describe(exc)} (set TURBOFEED_TRACEBACK=1 to see where)")
        return 2


if __name__ == "__main__":
    sys.exit(main())
