#!/usr/bin/env python3
"""Baseline: torch.utils.data.DataLoader + Pillow, the way most training scripts do it."""

import io
import os
import random
import sys

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402


class TarJpegs(torch.utils.data.Dataset):
    def __init__(self, items, pipeline):
        self.items, self.pipeline = items, pipeline
        self.files = {}
        self.mean = torch.tensor(C.MEAN).view(3, 1, 1)
        self.std = torch.tensor(C.STD).view(3, 1, 1)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, offset, size, label = self.items[i]
        f = self.files.get(path) or self.files.setdefault(path, open(path, "rb"))
        f.seek(offset)
        img = Image.open(io.BytesIO(f.read(size))).convert("RGB")
        if self.pipeline == "eval":
            w, h = img.size
            s = 256 / min(w, h)
            img = img.resize((max(256, int(w * s)), max(256, int(h * s))), Image.BILINEAR)
            w, h = img.size
            left, top = int(round((w - 224) / 2)), int(round((h - 224) / 2))
            img = img.crop((left, top, left + 224, top + 224))
        else:
            rng = random.Random()
            left, top, cw, ch = C.rrc_params(*img.size, rng)
            img = img.resize((224, 224), Image.BILINEAR, box=(left, top, left + cw, top + ch))
            if rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.asarray(img)).permute(2, 0, 1)
        if self.pipeline == "train-float":
            x = (x.float() / 255 - self.mean) / self.std
        return x, label


def main():
    args = C.parse(__doc__)
    torch.set_num_threads(1)
    ds = TarJpegs(C.members(C.shards(args.data)), args.pipeline)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                         persistent_workers=True)
    C.run("pytorch", torch.__version__, args, lambda e: loader, count=lambda b: len(b[1]))


if __name__ == "__main__":
    main()
