"""The GPU staging path on a machine without a GPU: storage -> staging buffer -> device and
back, with a CPU stand-in for CUDA memory (``CpuStandInDevice`` in conftest; the one
stand-in these tests use, for hardware that cannot exist here). Everything else, the
server, files, pool and threads, is real."""

from __future__ import annotations

import os

import pytest

from turbofeed.gds import BufferTooSmallError
from turbofeed.io.retry import RemoteError

pytest.importorskip("torch")

# 3 staging buffers for a depth of 4: transfers also wait for the pool, not just the depth.
STAGED = dict(enabled=False, max_transfer_size="16K", buffer_pool_size="48K", queue_depth=4)


@pytest.mark.parametrize("size", [1, 100 << 10])
def test_object_round_trip_through_staging(make_client, helpers, size):
    client = make_client(**STAGED)
    src = helpers.StandIn(size)
    src.flat.numpy()[:] = helpers.payload(size, seed=21)
    assert client.write_from_gpu(helpers.BUCKET, f"staged/{size}.bin", src) == size
    dst = helpers.StandIn(size + 7)
    assert client.read_to_gpu(helpers.BUCKET, f"staged/{size}.bin", dst) == size
    assert helpers.same_bytes(dst.flat.numpy()[:size], src.flat.numpy())
    assert (dst.flat.numpy()[size:] == 0).all()
    # every byte went through the pool in pieces of at most 16 KiB, at most 3 at once
    ups = sorted((pos, n) for kind, pos, n in dst.copies if kind == "upload")
    assert ups == [(p, min(16384, size - p)) for p in range(0, size, 16384)]
    stats = client.stats()["staging"]
    assert stats["peak_lent"] <= 3 and stats["allocated"] <= 3 and stats["lent"] == 0 and not stats["pinned"]


@pytest.mark.parametrize("size", [0, 1, 100 << 10])
def test_file_round_trip_through_staging(make_client, helpers, tmp_path, size):
    client = make_client(**STAGED)
    src = helpers.StandIn(size)
    src.flat.numpy()[:] = helpers.payload(size, seed=22)
    path = tmp_path / "f.bin"
    assert client.file_method(src) == "staged"
    assert client.async_write_file(path, src).result(timeout=60) == size
    assert path.read_bytes() == src.flat.numpy().tobytes()
    dst = helpers.StandIn(size)
    assert client.async_read_file(path, dst).result(timeout=60) == size
    assert helpers.same_bytes(dst.flat.numpy(), src.flat.numpy())


def test_device_buffer_too_small(make_client, helpers, tmp_path):
    client = make_client(**STAGED)
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(5000))
    with pytest.raises(BufferTooSmallError, match=r"5000 bytes to read, but the buffer \(stand-in"):
        client.read_file_to_gpu(path, helpers.StandIn(4999))


def test_device_failure_mid_write_leaves_no_file(make_client, helpers, tmp_path):
    client = make_client(**STAGED)
    (tmp_path / "old.bin").write_bytes(b"old")
    for name in ("new.bin", "old.bin"):
        with pytest.raises(OSError, match="stand-in device copy failed"):
            client.write_file_from_gpu(tmp_path / name, helpers.StandIn(100 << 10, fail_download_at=50_000))
    assert os.listdir(tmp_path) == ["old.bin"] and (tmp_path / "old.bin").read_bytes() == b"old"
    assert client.stats()["staging"]["lent"] == 0  # buffers came back despite the failure


def test_device_failure_mid_upload_leaves_no_object(s3_server, make_client, helpers):
    """The device copy of part 2 of a 3-part multipart upload fails: aborted, no object."""
    client = make_client(enabled=False, max_transfer_size="5M", buffer_pool_size="10M", queue_depth=2)
    with pytest.raises((OSError, RemoteError)):
        client.write_from_gpu(helpers.BUCKET, "staged/broken.bin", helpers.StandIn(12 << 20, fail_download_at=6 << 20))
    boto = helpers.boto(s3_server)
    assert boto.list_objects_v2(Bucket=helpers.BUCKET, Prefix="staged/broken").get("KeyCount") == 0
    assert boto.list_multipart_uploads(Bucket=helpers.BUCKET, Prefix="staged/").get("Uploads", []) == []


def test_device_ids_are_enforced(make_client, helpers, tmp_path):
    client = make_client(device_ids=[1], **{k: v for k, v in STAGED.items()})
    with pytest.raises(Exception, match=r"cuda:0, but the GDS config allows devices \[1\] \(argument\)"):
        client.read_file_to_gpu(tmp_path, helpers.StandIn(10))
