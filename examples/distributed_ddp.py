#!/usr/bin/env python3
"""DistributedDataParallel training fed by turbofeed: GPUs with NCCL, or CPUs with Gloo.

Run it under torchrun (one process per GPU; or per CPU slot with --gpus 0):

    torchrun --nproc_per_node=8 examples/distributed_ddp.py --data-path "shards/shard-{000000..000146}.tar"
    torchrun --nnodes=2 --node_rank=0 --master_addr=HOST0 --master_port=29500 --nproc_per_node=8 \\
        examples/distributed_ddp.py --data-path ...        # and --node_rank=1 on the second node

Shards in S3 larger than a node's disk stream through a bounded node cache, the ranks of
a node sharing its downloads (LOCAL_WORLD_SIZE ranks per node):

    torchrun --nnodes=2 ... examples/distributed_ddp.py --data-path s3://bucket/train/ \\
        --streaming --cache-bytes 200000000000

or let it start its own processes on each node:

    python examples/distributed_ddp.py --data-path ... --gpus 8 --nodes 2 --node-rank 0 --master-addr HOST0

Each rank reads its strided share of every epoch (turbofeed picks rank and world size up
from torchrun, SLURM, Horovod or MPI variables), all ranks take the same number of steps,
loss and accuracy are all-reduced, rank 0 writes checkpoints that include the loader's
resume state, and `--resume` continues mid-epoch exactly (or elastically, on another
number of processes). The model is deliberately tiny: the point is the data path.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import turbofeed
from turbofeed import transforms as T


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-path", required=True, help="tar shards, brace pattern, folder or ImageFolder")
    p.add_argument("--gpus", type=int, default=None,
                   help="processes (GPUs) per node when not under torchrun; 0 = CPU with Gloo "
                        "(default: all visible GPUs, else CPU)")
    p.add_argument("--procs-per-node", type=int, default=2, help="CPU processes per node with --gpus 0")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29512)
    p.add_argument("--streaming", action="store_true",
                   help="stream s3:// shards block by block through the node cache "
                        "(default: only when they exceed the cache)")
    p.add_argument("--cache-bytes", type=int, default=None,
                   help="node cache bound for s3:// shards "
                        "(default: $TURBOFEED_S3_CACHE_SIZE, else half the free space)")
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--workers", type=int, default=2, help="turbofeed decode threads per process")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--base-lr", type=float, default=0.05, help="learning rate of one process; scaled by world size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--drop-last", action="store_true")
    p.add_argument("--checkpoint", default=None, help="checkpoint file (rank 0 writes it)")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--log-keys", default=None, help="append each step's sample keys to FILE.rank<r>.jsonl")
    p.add_argument("--crash-after-step", type=int, default=None,
                   help="testing aid: rank 0 kills itself (SIGKILL) right after checkpointing this step")
    return p.parse_args(argv)


class TinyNet(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.head(x.mean(dim=(2, 3)))


def save_checkpoint(path: str, **state) -> None:
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash mid-write never leaves a torn checkpoint


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum `values` over all ranks; return once the backend has let go of the tensor it reduced.

    Gloo's worker thread drops its reference to a collective's tensor a moment after the
    collective completes, and dropping a tensor made in Python takes the GIL. If the process
    is already shutting down by then, that aborts it ("terminate called without an active
    exception"): DDP keeps the group's threads alive past destroy_process_group (pytorch
    #107298, #179291), and on a busy machine that moment can come after the script's end.
    Waiting here for the release (normally microseconds) keeps it inside the run.
    """
    sent = values.clone()
    dist.all_reduce(sent)
    total = sent.clone()
    released = weakref.ref(sent)
    del sent
    deadline = time.monotonic() + 10.0
    while released() is not None and time.monotonic() < deadline:
        time.sleep(0.001)
    return total


def train(args: argparse.Namespace) -> None:
    use_cuda = torch.cuda.is_available() and args.gpus != 0
    backend = "nccl" if use_cuda else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)

    # Rank and world size come from the initialised process group.
    loader = turbofeed.DataLoader(
        turbofeed.Dataset(args.data_path, streaming=True if args.streaming else None, storage=turbofeed.S3Config(cache_max_bytes=args.cache_bytes) if args.cache_bytes else None), batch_size=args.batch_size, num_workers=args.workers, shuffle=True,
        seed=args.seed, drop_last=args.drop_last, enable_distributed=True,
        transform=T.imagenet_train(args.image_size, normalize=True),
        device=device if use_cuda else None, return_keys=bool(args.log_keys))
    model = TinyNet(args.classes).to(device)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
    lr = args.base_lr * world  # linear scaling rule
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)

    start_epoch, step = 0, 0
    if args.resume and args.checkpoint and os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, map_location=device, weights_only=False)
        model.load_state_dict(ckpt["model"])
        if ckpt["world_size"] == world:
            opt.load_state_dict(ckpt["optimizer"])  # momentum buffers; lr is rescaled above
        loader.load_state_dict(ckpt["loader"])
        start_epoch, step = ckpt["loader"]["epoch"], ckpt["step"]
        if rank == 0:
            print(f"resumed at epoch {start_epoch}, sample {ckpt['loader']['samples_done']}, step {step} "
                  f"(saved by {ckpt['world_size']} processes, now {world})", flush=True)
    keys_log = open(f"{args.log_keys}.rank{rank}.jsonl", "a") if args.log_keys else None

    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)  # keeps a resumed epoch's position
        started, seen = time.perf_counter(), 0
        totals = torch.zeros(3, device=device)  # loss sum, correct, samples
        for batch in loader:
            images, labels = batch[0].to(device), batch[1].to(device) % args.classes
            logits = ddp(images)
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            seen += len(labels)
            with torch.no_grad():
                totals += torch.stack([loss.detach() * len(labels),
                                       (logits.argmax(1) == labels).sum().float(),
                                       torch.tensor(float(len(labels)), device=device)])
            if keys_log:
                keys_log.write(json.dumps({"epoch": epoch, "step": step, "keys": batch[2]}) + "\n")
                keys_log.flush()
            if args.checkpoint and step % args.checkpoint_every == 0 and rank == 0:
                save_checkpoint(args.checkpoint, model=model.state_dict(), optimizer=opt.state_dict(),
                                loader=loader.state_dict(), step=step, world_size=world)
            if args.crash_after_step == step and rank == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        totals = all_reduce_sum(totals)  # metrics over all ranks
        elapsed = time.perf_counter() - started
        if rank == 0:
            loss_avg, acc = (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()
            print(f"epoch {epoch}: loss {loss_avg:.3f} acc {acc:.3f} steps {len(loader)} "
                  f"rank0 {seen / elapsed:.0f} images/s lr {lr:g}", flush=True)
    if args.checkpoint and rank == 0:
        save_checkpoint(args.checkpoint, model=model.state_dict(), optimizer=opt.state_dict(),
                        loader=loader.state_dict(), step=step, world_size=world)
    if keys_log:
        keys_log.close()
    loader.close()
    del ddp, opt  # free the DDP reducer while the interpreter is fully alive
    dist.barrier()  # no rank tears the group down while another still talks to it
    dist.destroy_process_group()


def _spawned(local_rank: int, args: argparse.Namespace, procs: int) -> None:
    os.environ.update(RANK=str(args.node_rank * procs + local_rank), LOCAL_RANK=str(local_rank),
                      WORLD_SIZE=str(args.nodes * procs), MASTER_ADDR=args.master_addr,
                      MASTER_PORT=str(args.master_port))
    train(args)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ and "MASTER_ADDR" in os.environ:
        # srun started one process per rank: hand its position to torch's env:// init.
        os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"],
                          LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"))
    if "RANK" in os.environ:
        train(args)  # started by torchrun / srun: one process per rank already
        return
    if args.gpus is None:
        args.gpus = torch.cuda.device_count()
    procs = args.gpus if args.gpus > 0 else args.procs_per_node
    torch.multiprocessing.spawn(_spawned, args=(args, procs), nprocs=procs, join=True)


if __name__ == "__main__":
    sys.exit(main())
