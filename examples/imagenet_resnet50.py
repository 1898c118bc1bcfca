#!/usr/bin/env python3
"""ResNet-50 on ImageNet shards with turbofeed: uint8 batches to the GPU, normalised there.

    python examples/imagenet_resnet50.py --train "imagenet/train/shard-{000000..001281}.tar" \\
        --val "imagenet/val/shard-{000000..000049}.tar" --batch-size 256 --workers 16
    torchrun --nproc_per_node=8 examples/imagenet_resnet50.py ...      # data parallel

Uses torchvision's resnet50 when torchvision is installed, otherwise the same
architecture defined below, so the script also runs where torchvision cannot be
installed. On a machine without a GPU it runs on the CPU (use small --image-size and
--max-steps to smoke-test it).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import turbofeed
from turbofeed import transforms as T


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


def resnet50(num_classes: int) -> nn.Module:
    try:
        from torchvision.models import resnet50 as tv_resnet50

        return tv_resnet50(num_classes=num_classes)
    except ImportError:
        pass
    layers, cin = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                   nn.MaxPool2d(3, 2, 1)], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True)
    p.add_argument("--val", default=None)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1, help="for batch 256; scaled linearly")
    p.add_argument("--max-steps", type=int, default=None, help="stop each epoch after this many steps")
    args = p.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    world = dist.get_world_size() if distributed else 1

    train = turbofeed.DataLoader(args.train, batch_size=args.batch_size, num_workers=args.workers, shuffle=True,
                                 drop_last=True, enable_distributed=distributed, device=device if cuda else None,
                                 channels_last=True, transform=T.imagenet_train(args.image_size, normalize=True))
    val = None
    if args.val:
        val = turbofeed.DataLoader(args.val, batch_size=args.batch_size, num_workers=args.workers,
                                   enable_distributed=distributed, device=device if cuda else None,
                                   channels_last=True, transform=T.imagenet_eval(args.image_size, normalize=True))
    model = resnet50(args.classes).to(device, memory_format=torch.channels_last)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    lr = args.lr * args.batch_size * world / 256
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(train))
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)

    for epoch in range(args.epochs):
        train.set_epoch(epoch)
        model.train()
        started, seen = time.perf_counter(), 0
        for step, (images, labels) in enumerate(train):
            with amp:
                loss = F.cross_entropy(model(images), labels.to(device) % args.classes)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            seen += len(labels)
            if args.max_steps and step + 1 >= args.max_steps:
                break
        rate = seen / (time.perf_counter() - started)
        msg = f"epoch {epoch}: loss {loss.item():.3f}, {rate:.0f} images/s per process"
        if val is not None:
            model.eval()
            correct = total = 0
            with torch.no_grad(), amp:
                for step, (images, labels) in enumerate(val):
                    correct += (model(images).argmax(1) == labels.to(device) % args.classes).sum().item()
                    total += len(labels)
                    if args.max_steps and step + 1 >= args.max_steps:
                        break
            msg += f", val acc {correct / max(total, 1):.3f}"
        if not distributed or dist.get_rank() == 0:
            print(msg, flush=True)
        if epoch == 0 and not distributed:
            print("loader profile (worker seconds per stage):\n" + train.profile(), flush=True)
    if distributed:
        del model  # DDP's reducer holds the process group: free it before the group, not at exit
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
