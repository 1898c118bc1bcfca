#!/usr/bin/env python3
"""One trainer fed over Ray against the local DataLoader on the same decode cores (issue 39).

A local Ray cluster of two raylets (``ray.cluster_utils.Cluster``): the head runs the
trainer (this process) and the read tasks, the worker node has ``--cores`` CPUs and a
``decode`` resource, so the decoding runs there. Measured, on ImageNet-like shards with
the train preset (RandomResizedCrop(224) + flip, uint8), batch 64, the best of
``--epochs`` epochs after a warm-up one:

- local: ``turbofeed.DataLoader`` with ``--cores`` decode threads in this process;
- actors: ``turbofeed.ray.read(..., transform=, decoders=cores)``, the actors on the worker
  node, the trainer iterating ``turbofeed.ray.loader``;
- trainer: the encoded bytes shipped to the trainer, decoded there by one
  ``turbofeed.ray.Decode`` (one core, in the trainer's process);

each as images/s and as a ratio to local, and the bytes each mode moves per image
between processes (encoded bytes from read task to decoder; with actors, the decoded
image to the trainer too). On a 2-core machine the two nodes share the cores: the
ratio is what to read, the goal being >= 0.8 for actors on another node.

    python bench/ray_data.py --data bench/.data/in1k [--cores 1] [--epochs 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from typing import Any

import numpy as np

import turbofeed
from turbofeed import transforms as T

BATCH = 64


def best_rate(make_batches: Any, epochs: int) -> float:
    """Images/s of the best of ``epochs`` passes after a warm-up pass."""
    best = 0.0
    for epoch in range(1 + epochs):
        started, images = time.perf_counter(), 0
        for batch in make_batches(epoch):
            images += len(batch[0])
        rate = images / (time.perf_counter() - started)
        if epoch:
            best = max(best, rate)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), ".data", "in1k"))
    parser.add_argument("--cores", type=int, default=1, help="decode cores: local threads, and the worker node's CPUs")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    shards = sorted(glob.glob(os.path.join(args.data, "*.tar")))
    if not shards:
        print(f"bench/ray_data.py: no .tar shards in {args.data}", file=sys.stderr)
        return 2
    import ray
    from ray.cluster_utils import Cluster

    import turbofeed.ray as tray

    transform = T.imagenet_train(224)
    loader = turbofeed.DataLoader(shards, batch_size=BATCH, num_workers=args.cores, shuffle=True, transform=transform)

    def local(epoch: int) -> Any:
        loader.set_epoch(epoch)
        return loader

    figures: dict[str, Any] = {"cores": args.cores, "images": len(turbofeed.DataLoader(shards, batch_size=1).dataset)}
    figures["local"] = round(best_rate(local, args.epochs))
    loader.close()

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=args.cores, resources={"decode": args.cores})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        def actors(epoch: int) -> Any:
            rows = tray.read(shards, epoch=epoch, transform=transform, decoders=args.cores,
                             actor_options={"resources": {"decode": 1}})
            return tray.loader(rows, batch_size=BATCH, epoch=epoch)

        def trainer(epoch: int) -> Any:
            return tray.loader(tray.read(shards, epoch=epoch), batch_size=BATCH, data=shards, transform=transform,
                               epoch=epoch)

        figures["actors"] = round(best_rate(actors, args.epochs))
        figures["trainer"] = round(best_rate(trainer, args.epochs))
    finally:
        ray.shutdown()
        cluster.shutdown()
    encoded = float(np.mean(turbofeed.DataLoader(shards, batch_size=1).dataset.ranges().sizes))
    decoded = 3 * 224 * 224
    figures["bytes_per_image"] = {"actors": round(encoded + decoded), "trainer": round(encoded)}
    figures["ratio"] = {mode: round(figures[mode] / figures["local"], 3) for mode in ("actors", "trainer")}
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
