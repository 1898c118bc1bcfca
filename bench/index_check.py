#!/usr/bin/env python3
"""What verifying the dataset index costs when it is opened (issue #25): the CRC-32C of
the whole file, and the whole open (checksum, header, map, count checks), on the index of
1M samples in 50 shards that bench/index.py makes (made here too when absent).

    python bench/index_check.py                          # bench/.data/index-1m
    python bench/index_check.py --data /tmp/x --samples 100000 --shards 5

Page cache warm (the index was just written or read), median of ``--repeats`` runs.
Prints one line; the row goes into bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from index import make_data  # noqa: E402  (bench/ is sys.path[0] when run as a script)

from turbofeed.io.dsindex import INDEX_NAME, build_index  # noqa: E402
from turbofeed.io.dsindex.fileformat import _PREAMBLE, checksum  # noqa: E402
from turbofeed.io.dsindex.load import DatasetIndex  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(HERE, ".data", "index-1m"))
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    make_data(args.data, args.samples, args.shards)
    path = os.path.join(args.data, INDEX_NAME)
    try:
        DatasetIndex(path)
    except Exception:  # absent, or of an older format: built now
        build_index(args.data, progress=False)
    size = os.path.getsize(path)
    crc, opened = [], []
    for _ in range(args.repeats):
        with open(path, "rb") as f:
            _, at, length, _ = _PREAMBLE.unpack(f.read(_PREAMBLE.size))
            t = time.perf_counter()
            checksum(f.fileno(), size, at, length)
            crc.append(time.perf_counter() - t)
        t = time.perf_counter()
        index = DatasetIndex(path)
        opened.append(time.perf_counter() - t)
    samples = int(index.sample_start[-1])
    print(f"index of {samples} samples, {size / 2**20:.1f} MiB: checksum {statistics.median(crc) * 1e3:.1f} ms, "
          f"whole open {statistics.median(opened) * 1e3:.1f} ms (median of {args.repeats}, page cache warm)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
