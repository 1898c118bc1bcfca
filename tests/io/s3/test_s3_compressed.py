"""io.s3.compressed: .tar.gz / .tgz / .tar.bz2 / .tar.xz objects on a real S3-compatible server
(moto, on 127.0.0.1) are downloaded once, decompressed into a plain copy in the node cache
and read from it, giving the samples of their plain equivalents; a cache too small for
the plain copy, and .tar.zst, report the shard."""

from __future__ import annotations

import bz2
import gc
import gzip
import lzma
import os

import pytest
from builders import small_jpeg, write_tar

pytest.importorskip("moto")
pytest.importorskip("boto3")

import turbofeed  # noqa: E402
from turbofeed.errors import DatasetError  # noqa: E402
from turbofeed.io import Dataset  # noqa: E402
from turbofeed.io.retry import RetryPolicy  # noqa: E402
from turbofeed.io.s3.client import S3Client  # noqa: E402
from turbofeed.io.s3.config import S3Config, configure  # noqa: E402
from turbofeed.io.s3.urls import close_clients  # noqa: E402
from turbofeed.testing import LocalS3Server  # noqa: E402

BUCKET = "tf-packed"
PER_SHARD = 20
FAST_RETRY = RetryPolicy(max_attempts=12, base_delay=0.005, max_delay=0.05)
PREFIX = f"s3://{BUCKET}/mix/"


def _members(s: int) -> list[tuple[str, bytes]]:
    out = []
    for i in range(PER_SHARD):
        key = f"s{s}-{i:04d}"
        out += [(f"{key}.jpg", small_jpeg(100 * s + i)), (f"{key}.cls", str((7 * s + i) % 5).encode())]
    return out


@pytest.fixture(scope="module")
def server():
    with LocalS3Server() as srv:
        yield srv


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> list[str]:
    """The local plain equivalents of the uploaded shards, in the prefix's order."""
    out = tmp_path_factory.mktemp("plain")
    return [write_tar(str(out / f"shard-{s}.tar"), _members(s)) for s in range(5)]


@pytest.fixture(scope="module")
def objects(server, plain) -> dict[str, bytes]:
    """Under s3://tf-packed/mix/: a plain .tar, a .tar.gz and a .tgz (the epoch's shards);
    under others/: the same shards as .tar.bz2 and .tar.xz, and a .tar.zst."""
    bodies = [open(p, "rb").read() for p in plain]
    out = {f"{PREFIX}a-plain.tar": bodies[0],
           f"{PREFIX}b-packed.tar.gz": gzip.compress(bodies[1], mtime=0),
           f"{PREFIX}c-packed.tgz": gzip.compress(bodies[2], mtime=0),
           f"s3://{BUCKET}/others/d.tar.bz2": bz2.compress(bodies[3]),
           f"s3://{BUCKET}/others/e.tar.xz": lzma.compress(bodies[4]),
           f"s3://{BUCKET}/others/f.tar.zst": b"\x28\xb5\x2f\xfd" + bodies[0]}
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test",
                               secret_access_key="test"))
    client.boto3_client().create_bucket(Bucket=BUCKET)
    for url, body in out.items():
        client.put(url, body)
    client.close()
    return out


@pytest.fixture(autouse=True)
def aws_env(server, point_aws_at):
    point_aws_at(server.endpoint)  # and a fresh node cache per test
    configure(S3Config(retry=FAST_RETRY))
    yield
    gc.collect()
    close_clients()
    configure(S3Config())


def _epoch(data) -> list[tuple]:
    loader = turbofeed.DataLoader(data, batch_size=8, num_workers=2, shuffle=True, seed=5,
                                  return_keys=True, on_error="raise",
                                  transform=turbofeed.transforms.imagenet_train(24))
    return [(images.clone(), labels.clone(), keys) for images, labels, keys in loader]


def _plain_copies() -> list[str]:
    folder = os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3", "objects")
    return sorted(n for n in os.listdir(folder) if n.endswith(".plain.tar"))


def test_epoch_over_gz_and_tgz_matches_the_plain_shards_each_fetched_once(objects, plain):
    got = _epoch(PREFIX)
    want = _epoch(plain[:3])
    assert len(got) == len(want) == 8  # 60 samples, batches of 8
    for (xa, ya, ka), (xb, yb, kb) in zip(got, want):
        assert [k.split("/")[1] for k in ka] == [k.split("/")[1] for k in kb]  # "<shard>/<key>"
        assert (ya == yb).all() and (xa == xb).all()
    stats = Dataset(PREFIX).storage_stats()  # the shared client's totals, this one adding no GET
    mix = [len(body) for url, body in objects.items() if url.startswith(PREFIX)]
    assert stats["bytes_read"] == sum(mix)  # every object once, whole; no ranged sample GET
    assert stats["cache_misses"] == 0 and stats["cache_hits"] >= 3 * PER_SHARD
    assert len(_plain_copies()) == 2


def test_a_second_dataset_reuses_the_plain_copy_and_index(objects, plain):
    first = Dataset(PREFIX)
    before = first.storage_stats()
    second = Dataset(PREFIX)  # while the first still pins its plain copies
    after = second.storage_stats()
    assert after["requests"] - before["requests"] == 1  # the LIST: no HEAD, no GET
    assert after["bytes_read"] == before["bytes_read"]
    local = Dataset(plain[:3])
    assert [second.read(g) for g in range(len(second))] == [local.read(g) for g in range(len(local))]
    assert (second.labels == local.labels).all() and second.damaged == []
    first.close()
    second.close()
    assert len(_plain_copies()) == 2
    assert len(os.listdir(os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3-index"))) == 3


def test_bz2_and_xz_are_read_and_zstd_is_reported(objects, plain, caplog):
    ds = Dataset(f"s3://{BUCKET}/others/")
    assert ds.damaged == [f"s3://{BUCKET}/others/f.tar.zst"]
    assert "zstd-compressed tar, not read" in caplog.text
    local = Dataset(plain[3:5])
    assert [ds.read(g) for g in range(len(ds))] == [local.read(g) for g in range(len(local))]
    with pytest.raises(DatasetError, match="f.tar.zst: zstd-compressed"):
        Dataset(f"s3://{BUCKET}/others/f.tar.zst", on_damage="raise")


def test_a_cache_too_small_for_the_plain_copy_reports_the_shard(objects, plain, caplog):
    url = f"{PREFIX}b-packed.tar.gz"
    plain_size = os.path.getsize(plain[1])
    for bound in (plain_size - 1, 1):  # the compressed object fits in the cache; it does not
        configure(S3Config(retry=FAST_RETRY, cache_max_bytes=bound))
        ds = Dataset([f"{PREFIX}a-plain.tar", url])
        assert ds.damaged == [url] and len(ds) == PER_SHARD
        assert f"does not fit in the s3:// node cache (bound {bound} bytes" in caplog.text
        assert "TURBOFEED_S3_CACHE_SIZE" in caplog.text
        assert _plain_copies() == []
        with pytest.raises(DatasetError, match="decompressed copy .* does not fit"):
            Dataset(url, on_damage="raise")
    scratch = os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3-indexing")
    assert os.listdir(scratch) == []  # the temporary compressed copies are gone


def test_a_plain_copy_in_use_is_never_evicted(objects, plain):
    gz, tgz = f"{PREFIX}b-packed.tar.gz", f"{PREFIX}c-packed.tgz"
    sizes = [os.path.getsize(p) for p in plain[1:3]]
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=sum(sizes) - 1))  # room for one
    first = Dataset(gz)
    assert first.damaged == [] and len(_plain_copies()) == 1
    with pytest.raises(DatasetError, match="no samples found .* 1 damaged"):
        Dataset(tgz)  # only evicting the pinned copy would make room for this one's
    assert first.read(3) == Dataset(plain[1]).read(3)
    first.close()  # unpinned: now it may go
    second = Dataset(tgz)
    assert second.damaged == [] and second.read(0) == Dataset(plain[2]).read(0)
    assert len(_plain_copies()) == 1
