#!/usr/bin/env python3
"""Baseline: torch.utils.data.DataLoader + Pillow, the way most training scripts do it:
a map-style Dataset over the tar members, 2 persistent worker processes."""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402
import _pillow  # noqa: E402


class TarJpegs(torch.utils.data.Dataset):
    """Map-style: index -> (image, label), reading each member with a positioned read."""

    def __init__(self, items, pipeline):
        self.items, self.pipeline = items, pipeline

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        img = _pillow.decode(C.read(self.items[i]))
        chw = _pillow.transform(img, self.pipeline)
        if self.pipeline == "train-jitter":  # the user augmentation, on the uint8 tensor
            chw = C.jitter(torch.from_numpy(np.ascontiguousarray(chw)))
        return chw, self.items[i][3]


def main():
    args = C.parse(__doc__)
    torch.set_num_threads(1)  # the main process only receives batches; 2 cores are the workers'
    ds = TarJpegs(C.members(C.shards(args.data)), args.pipeline)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                         persistent_workers=True)
    C.run("pytorch", f"torch {torch.__version__}, pillow {C.version('pillow')}", args, lambda e: loader)


if __name__ == "__main__":
    main()
