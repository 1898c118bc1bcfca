#!/usr/bin/env python3
"""Epoch throughput over ``https://``, ``gs://`` and ``az://`` against ``s3://`` on the same
small data, each store on a local server on 127.0.0.1 (the test servers of
``tests/io/stores/``: a Range-capable HTTP server, gcp-storage-emulator behind its XML
front, Azurite; moto for S3), interleaved, ``--repeats`` times each (median):

* cold: a DataLoader built and run for one epoch with an empty node cache (listing or
  HEADs, whole-shard downloads, indexing, decoding);
* per-sample: the node cache too small for any shard (``cache_max_bytes=1``), so every
  sample is a ranged GET: the store's request path alone.

    python bench/stores.py --repeats 3

The servers are all local processes on the cores the loader uses (moto and the GCS
emulator in Python, Azurite in node): the numbers compare turbofeed's path through each
store on this machine, not the clouds. The result goes into the ``stores`` block of
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "io", "stores")]

from _results import write_block  # noqa: E402

BEGIN, END = "<!-- stores:begin -->", "<!-- stores:end -->"


def make_shards(folder: str, shards: int, per_shard: int) -> list[str]:
    from builders import encode, photo

    names = []
    for s in range(shards):
        name = f"shard-{s:04d}.tar"
        with tarfile.open(os.path.join(folder, name), "w") as tar:
            for i in range(per_shard):
                for ext, body in ((".jpg", encode(photo(96, 128, seed=s * per_shard + i))), (".cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(f"k{s:03d}-{i:04d}{ext}")
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
        names.append(name)
    return names


def start(kind: str, folder: str, names: list[str], workdir: str):
    """(server, spec, S3Config fields) of ``kind`` holding the shards."""
    from servers import Azurite, GCSEmulator, RangeHTTPServer

    from turbofeed.io import AzureConfig, GCSConfig, S3Config
    from turbofeed.io.stores.client import S3Client

    blobs = [(n, open(os.path.join(folder, n), "rb").read()) for n in names]
    brace = f"shard-{{0000..{len(names) - 1:04d}}}.tar"
    if kind == "https":
        srv = RangeHTTPServer()
        for n, body in blobs:
            srv.files[f"/d/{n}"] = body
        return srv, f"{srv.endpoint}/d/{brace}", {}
    if kind == "s3":
        from turbofeed.testing import LocalS3Server

        srv = LocalS3Server(in_process=False)
        settings = dict(endpoint_url=srv.endpoint, access_key_id="test", secret_access_key="test")
        S3Client(S3Config(**settings)).boto3_client().create_bucket(Bucket="bench")
        prefix = "s3://bench/d/"
    elif kind == "gs":
        srv = GCSEmulator()
        srv.create_bucket("bench")
        settings = {"gcs": GCSConfig(endpoint_url=srv.endpoint)}
        prefix = "gs://bench/d/"
    else:
        srv = Azurite(workdir)
        srv.create_container("bench")
        settings = {"azure": AzureConfig(connection_string=srv.connection_string)}
        prefix = "az://bench/d/"
    client = S3Client(S3Config(**settings))
    for n, body in blobs:
        client.put(prefix + n, body)
    client.close()
    return srv, prefix, settings


def epoch(spec: str, settings: dict, cache_dir: str, **config) -> tuple[int, float]:
    import turbofeed
    from turbofeed.io import S3Config
    from turbofeed.io.stores.urls import close_clients

    t0 = time.perf_counter()
    dl = turbofeed.DataLoader(turbofeed.Dataset(spec, cache_dir=cache_dir, storage=S3Config(**settings, **config)),
                              batch_size=32, num_workers=2, shuffle=True, seed=1,
                              transform=turbofeed.transforms.imagenet_eval(64))
    n = sum(len(b[1]) for b in dl)
    dl.close()
    close_clients()
    return n, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--per-shard", type=int, default=100)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args()
    kinds = ["s3", "https", "gs", "az"]
    with tempfile.TemporaryDirectory() as tmp:
        names = make_shards(tmp, args.shards, args.per_shard)
        total = sum(os.path.getsize(os.path.join(tmp, n)) for n in names)
        servers = {k: start(k, tmp, names, tempfile.mkdtemp(dir=tmp)) for k in kinds}
        times: dict[tuple[str, str], list[float]] = {}
        samples = 0
        try:
            for k in kinds:  # warm-up, untimed: imports, first connections, server start-up costs
                epoch(servers[k][1], servers[k][2], tempfile.mkdtemp(dir=tmp))
            for r in range(args.repeats):
                for k in kinds:  # interleaved: a slow moment of the machine hits every store
                    srv, spec, settings = servers[k]
                    for mode, config in (("cold", {}), ("per-sample", {"cache_max_bytes": 1})):
                        samples, s = epoch(spec, settings, tempfile.mkdtemp(dir=tmp), **config)
                        times.setdefault((k, mode), []).append(s)
                        print(f"repeat {r} {k:5s} {mode:10s} {samples / s:8.0f} samples/s", flush=True)
        finally:
            for srv, _, _ in servers.values():
                srv.stop()
    rate = {key: samples / statistics.median(v) for key, v in times.items()}
    rows = "\n".join(f"| `{k}://` | {rate[(k, 'cold')]:.0f} | {rate[(k, 'cold')] / rate[('s3', 'cold')]:.2f} | "
                     f"{rate[(k, 'per-sample')]:.0f} | {rate[(k, 'per-sample')] / rate[('s3', 'per-sample')]:.2f} |"
                     for k in kinds)
    block = f"""{BEGIN}
## Object stores: `https://`, `gs://`, `az://` against `s3://` (`bench/stores.py`)

{args.shards} shards x {args.per_shard} JPEGs (128x96, {total / 2**20:.1f} MiB), DataLoader
(imagenet_eval(64), batch 32, 2 threads, shuffled) per store, each on a local server on
127.0.0.1: moto (`s3://`), a Range-capable Python HTTP server (`https://`, served over
http), gcp-storage-emulator behind the tests' XML front (`gs://`), Azurite (`az://`).
Interleaved, median of {args.repeats}; samples/s. cold: empty node cache (listing/HEADs,
whole-shard downloads, indexing, decoding); per-sample: no cache room, one ranged GET per
sample. {platform.processor() or platform.machine()}, {os.cpu_count()} cores shared with
other jobs (noisy machine): the servers share the cores with the loader, so this ranks
turbofeed's path through each store here, not the clouds' speed.

| store | cold | vs s3 | per-sample | vs s3 |
|---|---|---|---|---|
{rows}
{END}"""
    print(block)
    write_block(args.out, block)


if __name__ == "__main__":
    main()
