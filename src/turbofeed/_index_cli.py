"""``turbofeed index DATA``: write the dataset index and say where, what and how fast."""

from __future__ import annotations

import argparse


def cmd_index(args: argparse.Namespace) -> int:
    from .io import build_index

    data = args.data[0] if len(args.data) == 1 else args.data
    done = build_index(data, out=args.out, threads=args.threads)
    size = f"{done.bytes / 2**20:.1f} MiB" if done.bytes >= 2**20 else f"{done.bytes / 1024:.1f} KiB"
    print(f"wrote {done.path}: {done.shards} shards, {done.samples} samples, {size} "
          f"({done.bytes_per_sample:.1f} bytes/sample) in {done.seconds:.1f} s")
    if done.unindexed:
        print(f"{done.unindexed} compressed or empty shards are listed without their samples: loaders "
              "index those on their own")
    if done.note:
        print(f"note: {done.note}")
    if args.out is not None:
        print(f"loaders use it when told: turbofeed.Dataset(..., index={done.path!r}) as their data")
    return 0
