"""turbofeed.dali.GPUDirectReader in real DALI CPU pipelines over moto's S3 on 127.0.0.1:
every object under the prefix once per epoch, byte for byte; .npy/.pt as arrays; the
seed documents' call with credentials from the AWS variables."""

from __future__ import annotations

import io

import numpy as np
import pytest

from builders import small_jpeg
from turbofeed.dali import DALI_FIX

pytest.importorskip("nvidia.dali", reason=f"NVIDIA DALI is not installed: {DALI_FIX}")
pytest.importorskip("moto", reason="moto[server] is the local S3 server: pip install 'turbofeed[test]'")
pytest.importorskip("boto3", reason="boto3 uploads the test objects: pip install 'turbofeed[test]'")

from nvidia.dali import fn, pipeline_def  # noqa: E402

import turbofeed  # noqa: E402
from turbofeed.dali import GPUDirectReader  # noqa: E402

BUCKET = "images"


@pytest.fixture(scope="module")
def server():
    """moto's S3 on 127.0.0.1 with 23 JPEGs under train/, 3 under val/ and .npy/.pt under arrays/."""
    import boto3

    from turbofeed.testing import LocalS3Server

    with LocalS3Server() as s3:
        client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1",
                              aws_access_key_id="test", aws_secret_access_key="test")
        client.create_bucket(Bucket=BUCKET)
        objects = {f"train/{i:04d}.jpg": small_jpeg(i) for i in range(23)}
        objects.update({f"val/{i:04d}.jpg": small_jpeg(100 + i) for i in range(3)})
        for i in range(5):
            buf = io.BytesIO()
            np.save(buf, np.arange(12, dtype=np.float32).reshape(3, 4) * i)
            objects[f"arrays/{i}.npy"] = buf.getvalue()
        for key, payload in objects.items():
            client.put_object(Bucket=BUCKET, Key=key, Body=payload)
        s3.objects = objects
        yield s3


@pytest.fixture
def aws_env(server, monkeypatch):
    """Credentials and region the usual way: the AWS variables (no keys in the call)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return server


def epoch(pipe) -> list:
    """Every output batch of one epoch, as lists of NumPy arrays; then reset."""
    out = []
    while True:
        try:
            outputs = pipe.run()
        except StopIteration:
            pipe.reset()
            return out
        out.append([[np.array(t[i]) for i in range(len(t))] for t in outputs])


def test_seed_example_returns_every_object_byte_for_byte(aws_env):
    @pipeline_def
    def training_pipeline():
        images = GPUDirectReader(endpoint=aws_env.endpoint, bucket=BUCKET, prefix="train/", return_keys=True)
        return images

    pipe = training_pipeline(batch_size=8, num_threads=2, device_id=None)
    expected = {k: v for k, v in aws_env.objects.items() if k.startswith("train/")}
    for _ in range(2):  # every epoch, each object once
        batches = epoch(pipe)
        assert [len(b[0]) for b in batches] == [8, 8, 7]
        got = {bytes(k).decode(): bytes(d) for b in batches for d, k in zip(*b)}
        assert got == expected


def test_the_seed_call_as_written(aws_env):
    """One output, no options beyond the seed's."""
    @pipeline_def
    def training_pipeline():
        images = GPUDirectReader(endpoint=aws_env.endpoint, bucket=BUCKET, prefix="val/")
        return images

    pipe = training_pipeline(batch_size=64, num_threads=4, device_id=None)
    (batch,) = epoch(pipe)
    assert sorted(bytes(d) for d in batch[0]) == sorted(v for k, v in aws_env.objects.items() if k.startswith("val/"))


def test_decodes_downstream(aws_env):
    @pipeline_def(batch_size=5, num_threads=2, device_id=None)
    def pipe():
        return fn.decoders.image(GPUDirectReader(endpoint=aws_env.endpoint, bucket=BUCKET, prefix="val/"),
                                 device="cpu")

    (batch,) = epoch(pipe())
    assert [a.shape for a in batch[0]] == [(32, 32, 3)] * 3


def test_npy_objects_come_as_arrays(aws_env):
    @pipeline_def(batch_size=5, num_threads=1, device_id=None)
    def pipe():
        return GPUDirectReader(endpoint=aws_env.endpoint, bucket=BUCKET, prefix="arrays/", return_keys=True)

    (batch,) = epoch(pipe())
    for data, key in zip(*batch):
        name = bytes(key).decode()
        np.testing.assert_array_equal(data, np.load(io.BytesIO(aws_env.objects[name])))
        assert data.dtype == np.float32 and data.shape == (3, 4)


def test_pt_objects_come_as_arrays(server, monkeypatch, aws_env):
    torch = pytest.importorskip("torch")
    import boto3

    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    tensors = {f"pt/{i}.pt": torch.full((2, 3), float(i)) for i in range(3)}
    for key, value in tensors.items():
        buf = io.BytesIO()
        torch.save(value, buf)
        client.put_object(Bucket=BUCKET, Key=key, Body=buf.getvalue())

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        return GPUDirectReader(endpoint=server.endpoint, bucket=BUCKET, prefix="pt/", return_keys=True)

    (batch,) = epoch(pipe())
    for data, key in zip(*batch):
        np.testing.assert_array_equal(data, tensors[bytes(key).decode()].numpy())


def test_shuffled_shards_split_the_objects(aws_env):
    def keys(shard_id, seed=0):
        @pipeline_def(batch_size=4, num_threads=1, device_id=None)
        def pipe():
            return GPUDirectReader(endpoint=aws_env.endpoint, bucket=BUCKET, prefix="train/", shuffle=True, seed=seed,
                                   shard_id=shard_id, num_shards=2, return_keys=True)

        p = pipe()
        return [[bytes(k).decode() for b in epoch(p) for k in b[1]] for _ in range(2)]

    (a0, a1), (b0, b1) = keys(0), keys(1)
    assert len(a0) == len(b0) == 12  # 23 objects: 12 each, one wrapped around
    assert set(a0) | set(b0) == {k for k in aws_env.objects if k.startswith("train/")}
    assert a0 != a1 and sorted(set(a0) | set(b0)) == sorted(set(a1) | set(b1))  # reshuffled per epoch


def test_an_empty_prefix_says_so(aws_env):
    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        return GPUDirectReader(endpoint=aws_env.endpoint, bucket=BUCKET, prefix="nothing-here/")

    with pytest.raises(turbofeed.DatasetError, match=f"no objects under s3://{BUCKET}/nothing-here/"):
        pipe()


def test_an_object_replaced_after_the_listing_raises_storage_error(server, aws_env):
    import boto3

    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    client.put_object(Bucket=BUCKET, Key="changing/a.bin", Body=b"first version")

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return GPUDirectReader(endpoint=server.endpoint, bucket=BUCKET, prefix="changing/")

    p = pipe()  # listed now: the read carries this ETag
    client.put_object(Bucket=BUCKET, Key="changing/a.bin", Body=b"second, longer version")
    with pytest.raises(turbofeed.StorageError, match=f"s3://{BUCKET}/changing/a.bin") as excinfo:
        p.run()
    assert "replaced since it was listed" in str(excinfo.value)


def test_read_threads_stop_when_dali_drops_the_pipeline(aws_env):
    import gc
    import threading
    import time

    @pipeline_def(batch_size=8, num_threads=1, device_id=None)
    def pipe():
        return GPUDirectReader(endpoint=aws_env.endpoint, bucket=BUCKET, prefix="train/", threads=2)

    before = set(threading.enumerate())
    p = pipe()
    p.run()
    started = [t for t in set(threading.enumerate()) - before if t.name.startswith("turbofeed-dali-objects-")]
    assert len(started) == 2
    del p
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in started) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert not any(t.is_alive() for t in started)
