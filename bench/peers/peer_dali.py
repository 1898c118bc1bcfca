#!/usr/bin/env python3
"""NVIDIA DALI, CPU only (device_id=None): webdataset reader, decode of only the crop
window (image_random_crop), antialiased resize, crop_mirror_normalize."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402

import nvidia.dali as dali  # noqa: E402
from nvidia.dali import fn, pipeline_def, types  # noqa: E402


@pipeline_def
def build(paths, pipeline):
    jpegs, labels = fn.readers.webdataset(paths=paths, ext=["jpg", "cls"], random_shuffle=True, initial_fill=1024,
                                          pad_last_batch=True, name="Reader")
    if pipeline == "eval":
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_shorter=256, antialias=True)
        crop, mirror = (224, 224), 0
    else:
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
        images = fn.resize(images, resize_x=224, resize_y=224, antialias=True)
        crop, mirror = None, fn.random.coin_flip()
    if pipeline == "train-float":
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mirror=mirror,
                                          mean=[m * 255 for m in C.MEAN], std=[s * 255 for s in C.STD])
    else:
        kw = {"crop": crop} if crop else {}
        images = fn.crop_mirror_normalize(images, dtype=types.UINT8, output_layout="CHW", mirror=mirror, **kw)
    return images, labels


def main():
    args = C.parse(__doc__)
    pipe = build(paths=C.shards(args.data), pipeline=args.pipeline, batch_size=args.batch_size,
                 num_threads=args.workers, device_id=None, seed=0, prefetch_queue_depth=2)
    pipe.build()
    size = pipe.epoch_size("Reader")
    steps = -(-size // args.batch_size)

    def epoch(_):
        left = size
        for _ in range(steps):
            images, labels = pipe.run()
            # pad_last_batch: the last batch is filled up with repeats, which are not delivered images.
            n = min(left, args.batch_size)
            left -= n
            array = images.as_array()[:n]  # (B, 3, 224, 224) uint8 or float32, like the other loaders deliver
            # .cls payloads differ in length, so labels are parsed one by one.
            ys = np.array([int(bytes(np.asarray(labels[i])).decode()) for i in range(n)])
            yield array, ys

    C.run("dali", C.version("nvidia-dali-cuda120"), args, epoch)


if __name__ == "__main__":
    main()
