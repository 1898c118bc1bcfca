"""256 MiB through the client, byte-exact: parallel ranged GETs and a multipart upload
against the local S3 server, and chunked file I/O. One 256 MiB payload is shared and
compared in 16 MiB slices; the read buffer is reused; the S3 server keeps the object
on disk (moto spools large objects to temporary files)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from turbofeed.gds import GDSConfig, GPUDirectClient

SIZE = 256 << 20


@pytest.fixture(scope="module")
def big():
    data = np.frombuffer(np.random.default_rng(256).bytes(SIZE), dtype=np.uint8)
    out = np.empty(SIZE, dtype=np.uint8)
    yield data, out
    del data, out


def test_256_mib_object(s3_server, helpers, big):
    data, out = big
    started = time.perf_counter()
    # 32 MiB per ranged GET and part, 2 in flight: parallel, yet the server (which reads
    # the whole object for every ranged GET) holds at most 2 x 256 MiB at once.
    with GPUDirectClient(s3_server.endpoint, "test", "test", region="us-east-1",
                         config=GDSConfig(max_transfer_size="32M", buffer_pool_size="64M", queue_depth=2)) as c:
        assert c.write_from_gpu(helpers.BUCKET, "large/256.bin", data) == SIZE
        out[:1] = ~data[:1]
        assert c.read_to_gpu(helpers.BUCKET, "large/256.bin", out) == SIZE
        stats = c.stats()["s3"]
    assert helpers.same_bytes(out, data)
    assert stats["bytes_read"] == SIZE and stats["bytes_written"] == SIZE
    assert stats["requests"] >= 1 + 8 + 8  # HEAD, 8 ranged GETs, 8 parts (+ create/complete)
    helpers.boto(s3_server).delete_object(Bucket=helpers.BUCKET, Key="large/256.bin")
    assert time.perf_counter() - started < 60


def test_256_mib_file(tmp_path, helpers, big):
    data, out = big
    path = tmp_path / "256.bin"
    started = time.perf_counter()
    with GPUDirectClient(config=GDSConfig(max_transfer_size="16M", queue_depth=4)) as c:
        assert c.write_file_from_gpu(path, data) == SIZE
        assert path.stat().st_size == SIZE
        out[:1] = ~data[:1]
        assert c.async_read_file(path, out).result(timeout=60) == SIZE
    assert helpers.same_bytes(out, data)
    path.unlink()
    assert time.perf_counter() - started < 60
