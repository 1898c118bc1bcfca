"""GPUDirectClient and S3: byte-exact round trips through host buffers against a real
S3-compatible server on 127.0.0.1, async variants, a too-small buffer, and uploads that
fail without leaving an object behind."""

from __future__ import annotations

import numpy as np
import pytest

from turbofeed.gds import BufferTooSmallError, GDSError
from turbofeed.io.retry import RemoteError, RetryPolicy
from turbofeed.io.stores.config import S3Config

SIZES = [0, 1, 100 << 10]
SMALL = dict(max_transfer_size="16K", buffer_pool_size="64K", queue_depth=4)  # 100 KiB = 7 ranged GETs


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_through_host_buffers(s3_server, make_client, helpers, size):
    client = make_client(**SMALL)
    data = helpers.payload(size, seed=size)
    assert client.write_from_gpu(helpers.BUCKET, f"rt/{size}.bin", data) == size
    stored = helpers.boto(s3_server).get_object(Bucket=helpers.BUCKET, Key=f"rt/{size}.bin")
    assert stored["Body"].read() == data.tobytes()  # what the server holds, read by plain boto3

    out = np.full(size + 5, 0xAB, dtype=np.uint8)  # a larger buffer: the tail stays untouched
    assert client.read_to_gpu(helpers.BUCKET, f"rt/{size}.bin", out) == size
    assert helpers.same_bytes(out[:size], data) and (out[size:] == 0xAB).all()
    if size > 16 << 10:
        assert client.stats()["s3"]["requests"] >= 1 + 7  # HEAD + one GET per 16 KiB chunk


@pytest.mark.parametrize("kind", ["bytearray", "memoryview", "torch"])
def test_other_host_buffers(make_client, helpers, kind):
    client = make_client(**SMALL)
    data = helpers.payload(40_000, seed=7)
    client.write_from_gpu(helpers.BUCKET, "kinds.bin", data)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        out = torch.zeros(10_000, dtype=torch.float32)  # 40 000 bytes, any dtype will do
        got = out.numpy().view(np.uint8)
    else:
        raw = bytearray(40_000)
        out = raw if kind == "bytearray" else memoryview(raw)
        got = np.frombuffer(raw, np.uint8)
    assert client.read_to_gpu(helpers.BUCKET, "kinds.bin", out) == 40_000
    assert helpers.same_bytes(got, data)


def test_partial_reads_with_offset_and_size(make_client, helpers):
    client = make_client(**SMALL)
    data = helpers.payload(50_000, seed=3)
    client.write_from_gpu(helpers.BUCKET, "part.bin", data)
    out = bytearray(20_000)
    assert client.read_to_gpu(helpers.BUCKET, "part.bin", out, offset=12_345, size=20_000) == 20_000
    assert bytes(out) == data[12_345:32_345].tobytes()
    assert client.read_to_gpu(helpers.BUCKET, "part.bin", out, offset=40_000) == 10_000
    assert bytes(out[:10_000]) == data[40_000:].tobytes()
    with pytest.raises(GDSError, match="outside the object"):
        client.read_to_gpu(helpers.BUCKET, "part.bin", out, offset=60_000)
    assert client.write_from_gpu(helpers.BUCKET, "head.bin", data, size=100) == 100
    assert client.object_size(helpers.BUCKET, "head.bin") == 100


@pytest.mark.parametrize("size", SIZES)
def test_async_round_trip(make_client, helpers, size):
    client = make_client(**SMALL)
    data = helpers.payload(size, seed=size + 1)
    futures = [client.async_write(helpers.BUCKET, f"async/{i}-{size}.bin", data) for i in range(3)]
    assert [f.result(timeout=60) for f in futures] == [size] * 3
    outs = [np.zeros(size, np.uint8) for _ in range(3)]
    futures = [client.async_read(helpers.BUCKET, f"async/{i}-{size}.bin", out) for i, out in enumerate(outs)]
    assert [f.result(timeout=60) for f in futures] == [size] * 3
    assert all(helpers.same_bytes(out, data) for out in outs)


def test_async_errors_come_from_the_future(make_client, helpers):
    client = make_client(**SMALL)
    future = client.async_read(helpers.BUCKET, "no/such/key.bin", bytearray(10))
    with pytest.raises(RemoteError, match="s3://tf-gds/no/such/key.bin"):
        future.result(timeout=60)


def test_without_async_the_future_is_already_done(make_client, helpers):
    client = make_client(enable_async=False, **SMALL)
    future = client.async_write(helpers.BUCKET, "sync.bin", b"xyz")
    assert future.done() and future.result() == 3


def test_buffer_too_small_names_object_and_sizes(make_client, helpers):
    client = make_client(**SMALL)
    client.write_from_gpu(helpers.BUCKET, "big/one.bin", helpers.payload(100 << 10))
    before = client.stats()["s3"]["bytes_read"]
    with pytest.raises(BufferTooSmallError) as info:
        client.read_to_gpu(helpers.BUCKET, "big/one.bin", bytearray(4096))
    text = str(info.value)
    assert "s3://tf-gds/big/one.bin" in text and "102400 bytes to read" in text and "holds 4096" in text
    assert "bytearray" in text and info.value.needed == 102400 and info.value.available == 4096
    assert client.stats()["s3"]["bytes_read"] == before  # refused before any GET


def test_read_only_and_bad_arguments(make_client, helpers):
    client = make_client(**SMALL)
    with pytest.raises(GDSError, match="read-only"):
        client.read_to_gpu(helpers.BUCKET, "x", b"immutable")
    with pytest.raises(GDSError, match="pass the bucket and the key separately"):
        client.read_to_gpu("s3://tf-gds/x", "x", bytearray(1))
    with pytest.raises(GDSError, match="empty object key"):
        client.write_from_gpu(helpers.BUCKET, "", b"")


def test_failed_multipart_upload_leaves_no_object(s3_server, make_client, helpers):
    """Every UploadPart PUT gets 503 SlowDown from the proxy: the multipart upload was
    created, fails in the middle, and must be aborted; the key must not appear."""
    from turbofeed.testing import FaultProxy

    boto = helpers.boto(s3_server)
    boto.put_object(Bucket=helpers.BUCKET, Key="fail/existing.bin", Body=b"old content")
    data = helpers.payload(12 << 20, seed=11)
    with FaultProxy(s3_server.endpoint, slowdown=1.0, methods=("PUT",)) as proxy:
        s3_config = S3Config(endpoint_url=proxy.endpoint, access_key_id="test", secret_access_key="test",
                             region="us-east-1", max_concurrency=2, part_size=5 << 20,
                             retry=RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.01))
        client = make_client(s3_config=s3_config, max_transfer_size="5M", buffer_pool_size="10M",
                             queue_depth=2)
        for key in ("fail/new.bin", "fail/existing.bin"):
            with pytest.raises(RemoteError, match=f"UploadPart .* s3://tf-gds/{key}.*SlowDown"):
                client.write_from_gpu(helpers.BUCKET, key, data)
        with pytest.raises(RemoteError):
            client.async_write(helpers.BUCKET, "fail/async.bin", data).result(timeout=60)
        assert proxy.counts["slowdown"] >= 3
    listed = boto.list_objects_v2(Bucket=helpers.BUCKET, Prefix="fail/").get("Contents", [])
    assert [o["Key"] for o in listed] == ["fail/existing.bin"]
    assert boto.get_object(Bucket=helpers.BUCKET, Key="fail/existing.bin")["Body"].read() == b"old content"
    uploads = boto.list_multipart_uploads(Bucket=helpers.BUCKET, Prefix="fail/").get("Uploads", [])
    assert uploads == []  # aborted, not left to a lifecycle rule


def test_closed_client_refuses_work(make_client, helpers):
    client = make_client(**SMALL)
    client.close()
    client.close()  # idempotent
    with pytest.raises(GDSError, match="closed"):
        client.read_to_gpu(helpers.BUCKET, "x", bytearray(1))
