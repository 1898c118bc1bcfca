#!/usr/bin/env python3
"""PyTorch Lightning fed by turbofeed, on CPUs or GPUs, one process or DDP.

    python examples/pytorch_lightning_example.py --data-path "shards/shard-{000000..000146}.tar"
    python examples/pytorch_lightning_example.py --data-path ... --accelerator gpu --devices 8 --strategy ddp

No turbofeed argument about ranks: the default ``enable_distributed=None`` reads rank and
world size from ``torch.distributed`` when the loader plans its pass (Lightning's process
group exists by then, wherever the loader was built) and splits the data. turbofeed's
DataLoader has ``state_dict()``/``load_state_dict()``, so Lightning stores its position
in checkpoints and a resumed fit continues mid-epoch.
"""

from __future__ import annotations

import argparse

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F

import turbofeed
from turbofeed import transforms as T


class ShardData(L.LightningDataModule):
    def __init__(self, data_path: str, batch_size: int, workers: int, image_size: int) -> None:
        super().__init__()
        self.data_path, self.batch_size, self.workers, self.image_size = data_path, batch_size, workers, image_size
        self.loader: turbofeed.DataLoader | None = None

    def train_dataloader(self) -> turbofeed.DataLoader:
        self.loader = turbofeed.DataLoader(
            self.data_path, batch_size=self.batch_size, num_workers=self.workers, shuffle=True,
            drop_last=True,
            transform=T.imagenet_train(self.image_size, normalize=True))
        return self.loader


class Classifier(L.LightningModule):
    def __init__(self, classes: int, lr: float) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))
        self.samples_seen = 0

    def on_train_epoch_start(self) -> None:
        loader = self.trainer.datamodule.loader
        if loader is not None:
            loader.set_epoch(self.current_epoch)  # same reshuffle on every rank

    def training_step(self, batch, batch_idx):
        images, labels = batch
        logits = self.net(images)
        loss = F.cross_entropy(logits, labels % self.hparams.classes)
        self.samples_seen += len(labels)
        self.log("train_loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def on_train_end(self) -> None:
        print(f"rank {self.global_rank}/{self.trainer.world_size}: {self.samples_seen} samples", flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr * self.trainer.world_size, momentum=0.9)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-path", required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--max-epochs", type=int, default=1)
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--strategy", default="auto")
    args = p.parse_args()
    trainer = L.Trainer(max_epochs=args.max_epochs, accelerator=args.accelerator, devices=args.devices,
                        strategy=args.strategy, enable_checkpointing=False, logger=False,
                        enable_progress_bar=False, use_distributed_sampler=False)
    trainer.fit(Classifier(args.classes, args.lr),
                datamodule=ShardData(args.data_path, args.batch_size, args.workers, args.image_size))


if __name__ == "__main__":
    main()
