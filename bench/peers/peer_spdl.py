#!/usr/bin/env python3
"""SPDL 0.8: a thread pipeline of FFmpeg demux + decode with the crop, scale and flip in the
decoder's filter graph, aggregated into batches and converted to one buffer."""

import os
import random
import sys

import numpy as np
import spdl.io
from spdl.pipeline import PipelineBuilder

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402


def make_decode(pipeline):
    def decode(item):
        data, label = item
        packets = spdl.io.demux_image(data)
        w, h = packets.width, packets.height
        if pipeline == "eval":
            s = 256 / min(w, h)
            rw, rh = max(256, int(w * s)), max(256, int(h * s))
            desc = f"scale={rw}:{rh},crop=224:224:{(rw - 224) // 2}:{(rh - 224) // 2},format=pix_fmts=rgb24"
        else:
            rng = random.Random()
            left, top, cw, ch = C.rrc_params(w, h, rng)
            flip = ",hflip" if rng.random() < 0.5 else ""
            desc = f"crop={cw}:{ch}:{left}:{top},scale=224:224{flip},format=pix_fmts=rgb24"
        return spdl.io.decode_packets(packets, filter_desc=desc), label
    return decode


def collate(items):
    frames, labels = zip(*items)
    images = spdl.io.to_numpy(spdl.io.convert_frames(list(frames)))  # (B, 224, 224, 3) uint8
    if PIPELINE == "train-float":
        images = ((images.astype(np.float32) / 255 - np.array(C.MEAN, np.float32)) / np.array(C.STD, np.float32))
    return images, np.array(labels)


def main():
    global PIPELINE
    args = C.parse(__doc__)
    PIPELINE = args.pipeline
    items = C.members(C.shards(args.data))

    def read(i):
        path, offset, size, label = items[i]
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size), label

    def epoch(e):
        order = list(range(len(items)))
        random.Random(e).shuffle(order)
        pipe = (PipelineBuilder().add_source(order).pipe(read, concurrency=args.workers)
                .pipe(make_decode(args.pipeline), concurrency=args.workers, output_order="completion")
                .aggregate(args.batch_size).pipe(collate).add_sink(4).build(num_threads=args.workers))
        with pipe.auto_stop():
            yield from pipe.get_iterator()

    C.run("spdl", getattr(spdl, "__version__", "0.8.0"), args, epoch)


if __name__ == "__main__":
    main()
