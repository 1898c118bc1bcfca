#!/usr/bin/env python3
"""PyPI turboloader 2.39.0: one tar path (the shards merged once), its fused train
augmentation (random resized crop + flip), float32 output; the uint8 rows convert."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402

import turboloader  # noqa: E402


def merged_tar(args) -> str:
    """turboloader takes a single tar: concatenate the shards' members into one (cached)."""
    import tarfile

    os.makedirs(args.cache, exist_ok=True)
    out = os.path.join(args.cache, "all.tar")
    if not os.path.exists(out):
        with tarfile.open(out + ".tmp", "w", format=tarfile.USTAR_FORMAT) as dst:
            for path in C.shards(args.data):
                with tarfile.open(path) as src:
                    for m in src:
                        dst.addfile(m, src.extractfile(m))
        os.replace(out + ".tmp", out)
    return out


def main():
    args = C.parse(__doc__)
    if args.pipeline == "eval":
        return C.unsupported("turboloader", args, "no resize-256 + center-crop-224 mode in its DataLoader")
    loader = turboloader.DataLoader(merged_tar(args), batch_size=args.batch_size, num_workers=args.workers,
                                    image_size=224, output_format="numpy", train_aug=True, shuffle=True, seed=0)

    def epoch(_):
        for batch in loader:
            images = batch[0] if isinstance(batch, (tuple, list)) else batch
            if args.pipeline == "train":  # it emits float32 only; uint8 batches need a conversion
                images = np.clip(images * 255.0 if images.max() <= 1.5 else images, 0, 255).astype(np.uint8)
            yield images

    C.run("turboloader", getattr(turboloader, "__version__", "2.39.0"), args, epoch, count=len)


if __name__ == "__main__":
    main()
