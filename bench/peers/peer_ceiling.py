#!/usr/bin/env python3
"""Decode ceiling: libjpeg-turbo (simplejpeg) full decode of every JPEG, N threads, bytes
already in memory, pixels dropped at once (so it measures decoding, not page faults)."""

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import simplejpeg

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402


def main():
    args = C.parse(__doc__)
    datas = []
    for path, offset, size, _ in C.members(C.shards(args.data)):
        with open(path, "rb") as f:
            f.seek(offset)
            datas.append(f.read(size))
    chunks = [datas[i::args.workers] for i in range(args.workers)]

    def work(chunk):
        for d in chunk:
            simplejpeg.decode_jpeg(d, colorspace="RGB")
        return len(chunk)

    pool = ThreadPoolExecutor(args.workers)
    C.run("ceiling", simplejpeg.__version__, args, lambda e: [sum(pool.map(work, chunks))], count=lambda n: n)


if __name__ == "__main__":
    main()
