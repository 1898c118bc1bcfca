#!/usr/bin/env python3
"""webdataset: shard-shuffled stream, 1000-sample shuffle buffer, Pillow decode and the
same RandomResizedCrop as the PyTorch baseline, WebLoader with 2 worker processes."""

import os
import random
import sys

import numpy as np
import torch
import webdataset as wds
from PIL import Image

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402

MEAN = torch.tensor(C.MEAN).view(3, 1, 1)
STD = torch.tensor(C.STD).view(3, 1, 1)


def make_transform(pipeline):
    def transform(img):
        if pipeline == "eval":
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
        return (x.float() / 255 - MEAN) / STD if pipeline == "train-float" else x
    return transform


def main():
    args = C.parse(__doc__)
    torch.set_num_threads(1)
    ds = (wds.WebDataset(C.shards(args.data), shardshuffle=len(C.shards(args.data)), empty_check=False)
          .shuffle(1000).decode("pil").to_tuple("jpg", "cls").map_tuple(make_transform(args.pipeline), int)
          .batched(args.batch_size))
    loader = wds.WebLoader(ds, batch_size=None, num_workers=args.workers, persistent_workers=True)
    C.run("webdataset", wds.__version__ if hasattr(wds, "__version__") else "1.0.2", args, lambda e: loader,
          count=lambda b: len(b[1]))


if __name__ == "__main__":
    main()
