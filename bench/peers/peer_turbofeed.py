#!/usr/bin/env python3
"""turbofeed.DataLoader on the same shards (threads, uint8 NCHW by default)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402

import turbofeed  # noqa: E402
from turbofeed import transforms as T  # noqa: E402


def main():
    args = C.parse(__doc__)
    transform = {"train": lambda: T.imagenet_train(224), "eval": lambda: T.imagenet_eval(224),
                 "train-float": lambda: T.imagenet_train(224, normalize=True),
                 # the user augmentation runs in the worker threads after the fused crop
                 "train-jitter": lambda: T.Compose([*T.imagenet_train(224).ops, C.jitter])}[args.pipeline]()
    loader = turbofeed.DataLoader(C.shards(args.data), batch_size=args.batch_size, num_workers=args.workers,
                                  shuffle=True, seed=0, transform=transform)
    C.run("turbofeed", turbofeed.__version__, args, lambda e: loader)
    print(loader.profile(), file=sys.stderr)


if __name__ == "__main__":
    main()
