"""One rank of tests/io/stores/test_streaming_torchrun.py, started by torchrun: streams ``s3://`` shards
(endpoint, credentials and node cache from the environment) and writes each step's sample
keys to ``LOG.rank<r>.jsonl``, and after each phase this process's S3 counters
(``shards_downloaded``, ``cache_misses``, ...: for failure messages) to ``LOG.rank<r>.s3.jsonl``.

One all-reduce per step keeps the ranks in step, as DDP training does: the ranks of a node
share a download only while they read near each other (within about the node cache); free
running ones, one a whole epoch ahead of the other, each fetch what the cache let go.

Phases (``built``, then ``epoch0``, ``epoch1``, ...) end at a barrier of all ranks; rank 0
then creates ``SYNC/<phase>.done`` and waits for the test to create ``SYNC/<phase>.go``,
so the test can read and reset each node's proxy counts between phases, and a byte is
attributed to the phase (epoch) that fetched it.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import turbofeed
from turbofeed import transforms as T


def pause(sync: str, phase: str, timeout: float = 120.0) -> None:
    dist.barrier()
    if dist.get_rank() == 0:
        open(os.path.join(sync, f"{phase}.done"), "w").close()
        go, deadline = os.path.join(sync, f"{phase}.go"), time.monotonic() + timeout
        while not os.path.exists(go):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {go} within {timeout:.0f} s")
            time.sleep(0.02)
    dist.barrier()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--log-keys", required=True)
    p.add_argument("--sync", required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--cache-bytes", type=int, required=True)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    node = int(os.environ["GROUP_RANK"])  # torchrun's --node_rank: the node whose proxy this rank uses
    loader = turbofeed.DataLoader(turbofeed.Dataset(args.data, streaming=True, storage=turbofeed.S3Config(cache_max_bytes=args.cache_bytes)),
                                  batch_size=args.batch_size, num_workers=1, shuffle=True, seed=0,
                                  enable_distributed=True, return_keys=True, on_error="raise",
                                  transform=T.imagenet_eval(16))
    shards = getattr(loader.dataset, "s3", None)  # the process's S3 counters, for failure messages
    s3_log = open(f"{args.log_keys}.rank{rank}.s3.jsonl", "w")

    def counters(phase: str) -> None:
        s3_log.write(json.dumps({"phase": phase, "s3": shards.stats() if shards else None}) + "\n")
        s3_log.flush()

    counters("built")
    pause(args.sync, "built")
    with open(f"{args.log_keys}.rank{rank}.jsonl", "w") as log:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            for step, (_, _, keys) in enumerate(loader):
                dist.all_reduce(torch.ones(1))  # in step with the other ranks, as training with DDP is
                log.write(json.dumps({"epoch": epoch, "step": step, "node": node, "keys": list(keys)}) + "\n")
            log.flush()
            counters(f"epoch{epoch}")
            pause(args.sync, f"epoch{epoch}")
    s3_log.close()
    loader.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
