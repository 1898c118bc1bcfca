"""A training script as a Lightning or Accelerate user writes it, for tests/torch/test_frameworks.py:
no turbofeed argument about ranks (``enable_distributed`` left at its default), the loader
built where such scripts build it. Each rank writes the sample keys of its steps to
``OUT.rank<r>.json``.

    python tests/framework_worker.py lightning DATA OUT          # Lightning starts the 2 ranks
    torchrun --nproc_per_node 2 tests/framework_worker.py accelerate DATA OUT [--stop-after N] [--resume]
"""

from __future__ import annotations

import argparse
import json
import os

import torch

import turbofeed
from turbofeed import transforms as T


def make_loader(data: str) -> turbofeed.DataLoader:
    return turbofeed.DataLoader(data, batch_size=8, num_workers=1, shuffle=True,
                                transform=T.imagenet_eval(16), return_keys=True)


def write(out: str, rank: int, keys: list[str], world: int) -> None:
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump({"world": world, "keys": keys}, f)


def lightning(args: argparse.Namespace) -> None:
    import lightning as L

    # Built before fit(), in every process, before Lightning starts the process group:
    # the split is read when the loader plans its pass.
    loader = make_loader(args.data)

    class Recorder(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(3, 2)
            self.keys: list[str] = []

        def training_step(self, batch, batch_idx):
            images, labels, keys = batch
            self.keys.extend(keys)
            return self.net(images.float().mean(dim=(2, 3))).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def on_train_end(self) -> None:
            write(args.out, self.global_rank, self.keys, self.trainer.world_size)

    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        default_root_dir=os.path.dirname(args.out))
    trainer.fit(Recorder(), train_dataloaders=loader)


def accelerate(args: argparse.Namespace) -> None:
    from accelerate import Accelerator

    loader = make_loader(args.data)  # built before the Accelerator starts the process group
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader, f"prepare() replaced the loader with {type(prepared)}"
    accelerator.register_for_checkpointing(loader)
    ckpt = os.path.join(os.path.dirname(args.out), "ckpt")
    if args.resume:
        accelerator.load_state(ckpt)
    keys: list[str] = []
    for step, (images, labels, batch_keys) in enumerate(loader):
        keys.extend(batch_keys)
        loss = model(images.float().mean(dim=(2, 3))).sum()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if step + 1 == args.stop_after:
            accelerator.save_state(ckpt)
    write(args.out, accelerator.process_index, keys, accelerator.num_processes)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("framework", choices=["lightning", "accelerate"])
    p.add_argument("data")
    p.add_argument("out")
    p.add_argument("--stop-after", type=int, default=None, help="save a checkpoint after this many steps")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    args = p.parse_args()
    torch.set_num_threads(1)
    lightning(args) if args.framework == "lightning" else accelerate(args)


if __name__ == "__main__":
    main()
