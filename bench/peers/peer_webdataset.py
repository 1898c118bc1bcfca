#!/usr/bin/env python3
"""webdataset: shard-shuffled stream, 1000-sample shuffle buffer, Pillow decode and the
same transforms as the PyTorch baseline, WebLoader with 2 persistent worker processes.
Shards are split between workers, so an even shard count keeps both busy."""

import os
import sys

import torch
import webdataset as wds

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402
import _pillow  # noqa: E402


def main():
    args = C.parse(__doc__)
    torch.set_num_threads(1)  # the main process only receives batches; 2 cores are the workers'
    shards = C.shards(args.data)
    ds = (wds.WebDataset(shards, shardshuffle=len(shards), empty_check=False)
          .shuffle(1000).decode("pil").to_tuple("jpg", "cls")
          .map_tuple(lambda img: _pillow.transform(img, args.pipeline), int)
          .batched(args.batch_size))
    loader = wds.WebLoader(ds, batch_size=None, num_workers=args.workers, persistent_workers=True)
    C.run("webdataset", C.version("webdataset"), args, lambda e: loader)


if __name__ == "__main__":
    main()
