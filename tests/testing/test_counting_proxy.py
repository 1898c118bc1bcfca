"""FaultProxy's traffic counts against a real S3-compatible server (moto on 127.0.0.1):
body bytes and GETs per object, whole and ranged, reset and snapshot, exact under
concurrent clients, and what faults and non-GET requests add."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")

from botocore.config import Config  # noqa: E402

from turbofeed.testing import FaultProxy, LocalS3Server  # noqa: E402

BUCKET = "tf-traffic"
KEY = "data/shard 000000+a.tar"  # a space and a plus: sent URL-encoded, counted decoded
NAME = f"{BUCKET}/{KEY}"
SIZE = 3 * (1 << 20) + 12345


@pytest.fixture(autouse=True)
def no_aws_setup(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                        region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))


@pytest.fixture(scope="module")
def server():
    with LocalS3Server() as srv:
        yield srv


@pytest.fixture(scope="module")
def blob(server) -> bytes:
    data = np.random.default_rng(0).bytes(SIZE)
    s3 = client(server.endpoint)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=data)
    s3.put_object(Bucket=BUCKET, Key="data/small.bin", Body=b"x" * 1000)
    return data


def test_whole_and_ranged_gets_are_counted_per_object(server, blob):
    with FaultProxy(server.endpoint) as proxy:
        s3 = client(proxy.endpoint)
        assert proxy.traffic() == {"bytes": 0, "gets": 0, "by_object": {}}
        assert s3.get_object(Bucket=BUCKET, Key=KEY)["Body"].read() == blob
        part = s3.get_object(Bucket=BUCKET, Key=KEY, Range="bytes=100-1099")["Body"].read()
        assert part == blob[100:1100]
        tail = s3.get_object(Bucket=BUCKET, Key=KEY, Range=f"bytes={SIZE - 10}-")["Body"].read()
        assert tail == blob[-10:]
        assert s3.get_object(Bucket=BUCKET, Key="data/small.bin")["Body"].read() == b"x" * 1000
        assert proxy.traffic() == {
            "bytes": SIZE + 1000 + 10 + 1000, "gets": 4,
            "by_object": {NAME: {"gets": 3, "bytes": SIZE + 1010},
                          f"{BUCKET}/data/small.bin": {"gets": 1, "bytes": 1000}}}
        assert proxy.counts["requests"] == 4


def test_reset_returns_the_counts_so_far_and_starts_from_zero(server, blob):
    with FaultProxy(server.endpoint) as proxy:
        s3 = client(proxy.endpoint)
        s3.get_object(Bucket=BUCKET, Key=KEY, Range="bytes=0-99")["Body"].read()
        snapshot = proxy.traffic()
        before = proxy.reset_traffic()
        assert before == snapshot == {"bytes": 100, "gets": 1, "by_object": {NAME: {"gets": 1, "bytes": 100}}}
        assert proxy.traffic() == {"bytes": 0, "gets": 0, "by_object": {}}
        s3.get_object(Bucket=BUCKET, Key=KEY, Range="bytes=0-9")["Body"].read()
        assert proxy.traffic()["by_object"] == {NAME: {"gets": 1, "bytes": 10}}
        assert before["by_object"][NAME] == {"gets": 1, "bytes": 100}  # the snapshot is a copy
        snapshot["by_object"][NAME]["gets"] = 99
        assert proxy.traffic()["by_object"][NAME]["gets"] == 1


def test_counts_are_exact_under_concurrent_clients(server, blob):
    threads, per_thread, span = 8, 25, 4096
    with FaultProxy(server.endpoint) as proxy:
        errors: list[BaseException] = []
        resets: list[dict] = []

        def work(t: int) -> None:
            try:
                s3 = client(proxy.endpoint)
                for i in range(per_thread):
                    start = (t * per_thread + i) * span
                    got = s3.get_object(Bucket=BUCKET, Key=KEY, Range=f"bytes={start}-{start + span - 1}")
                    assert got["Body"].read() == blob[start:start + span]
                    if i == per_thread // 2 and t == 0:
                        resets.append(proxy.reset_traffic())  # racing the others' requests
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert not errors, errors
        total = threads * per_thread
        (before,), after = resets, proxy.traffic()
        # Each GET and each body counted once, on one side of the reset or the other.
        assert before["gets"] + after["gets"] == total and 0 < after["gets"] < total
        assert before["bytes"] + after["bytes"] == total * span
        for counts in (before, after):
            assert counts["by_object"][NAME] == {"gets": counts["gets"], "bytes": counts["bytes"]}
        assert proxy.counts["requests"] == total


def test_faults_heads_listings_and_uploads(server, blob):
    with FaultProxy(server.endpoint, truncate=1.0, methods=("GET",)) as proxy:
        s3 = client(proxy.endpoint)
        with pytest.raises(Exception):
            s3.get_object(Bucket=BUCKET, Key=KEY, Range="bytes=0-999")["Body"].read()
        assert proxy.traffic()["by_object"] == {NAME: {"gets": 1, "bytes": 500}}  # the half sent
        proxy.enabled = False
        proxy.reset_traffic()
        assert s3.head_object(Bucket=BUCKET, Key=KEY)["ContentLength"] == SIZE
        s3.put_object(Bucket=BUCKET, Key="data/new.bin", Body=b"y" * 5000)
        assert proxy.traffic() == {"bytes": 0, "gets": 0, "by_object": {}}  # no body back, no GET
        listing = s3.list_objects_v2(Bucket=BUCKET, Prefix="data/")
        assert {o["Key"] for o in listing["Contents"]} >= {KEY, "data/small.bin", "data/new.bin"}
        listed = proxy.traffic()["by_object"]
        assert list(listed) == [BUCKET] and listed[BUCKET]["gets"] == 1 and listed[BUCKET]["bytes"] > 0
    with FaultProxy(server.endpoint, slowdown=1.0) as proxy:
        s3 = client(proxy.endpoint)
        with pytest.raises(Exception, match="SlowDown"):
            s3.get_object(Bucket=BUCKET, Key=KEY)
        counted = proxy.traffic()["by_object"][NAME]
        assert counted["gets"] == 1 and 0 < counted["bytes"] < 200  # the 503's XML, not the object
