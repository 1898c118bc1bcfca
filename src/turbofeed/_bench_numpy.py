"""``turbofeed bench`` without PyTorch: the same engine and decode stage, through
:class:`turbofeed.Pipeline` (NumPy samples) instead of ``turbofeed.DataLoader``.

The demo (``scripts/demo.sh``) installs turbofeed's core dependencies only, so this is
what it streams with; with PyTorch installed, ``bench`` measures the DataLoader.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np


def run(args: argparse.Namespace, data: Any, transform: Any) -> int:
    """Stream ``data`` for ``args.warmup + args.epochs`` epochs, printing images/s."""
    from .pipeline import Pipeline

    pipe = Pipeline(data, num_workers=args.workers, shuffle=True, seed=0, transform=transform)
    print(f"{len(pipe)} samples, batches of {args.batch_size}, {pipe.num_workers} workers, pipeline "
          f"{args.pipeline} (PyTorch is not installed: turbofeed.Pipeline, NumPy samples)")
    rates = []
    try:
        for epoch in range(args.warmup + args.epochs):
            pipe.set_epoch(epoch)
            pipe.start()
            label = f"epoch {epoch}" + ("" if epoch >= args.warmup else " (warm-up)")
            started, images = time.perf_counter(), 0
            while batch := pipe.next_batch(args.batch_size):
                images += len(batch)
            rate = images / (time.perf_counter() - started)
            print(f"{label}: {images} images, {rate:.0f} images/s")
            if epoch >= args.warmup:
                rates.append(rate)
    finally:
        pipe.stop()
    if rates:
        print(f"median {np.median(rates):.0f} images/s over {len(rates)} epoch(s)")
    print("stage profile (seconds in the worker threads; then the consumer's wait):")
    print(pipe.stats.profile())
    bad = pipe.stats.as_dict()
    if bad["errors"]:
        print(f"bad samples: {bad['errors']} (replaced {bad['replaced']}, skipped {bad['skipped']})")
    return 0


__all__ = ["run"]
