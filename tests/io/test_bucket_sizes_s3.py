"""Aspect-ratio buckets over ``s3://`` shards (a local S3 server): refused without a
dataset index (probing would download every shard), working from the index that
``turbofeed index PREFIX`` writes, whose sizes come from the images' headers."""

from __future__ import annotations

import pytest
from builders import encode, photo, tar_bytes

import turbofeed
from turbofeed.errors import DatasetError
from turbofeed.io.dsindex import build_index
from turbofeed.transforms import BucketResize, Compose

BUCKET = "tf-buckets"
BUCKETS = [(32, 32), (24, 48)]


@pytest.fixture
def s3(point_aws_at):
    pytest.importorskip("moto")
    pytest.importorskip("boto3")
    from turbofeed.io.retry import RetryPolicy
    from turbofeed.io.stores.client import S3Client
    from turbofeed.io.stores.config import S3Config, configure
    from turbofeed.io.stores.urls import close_clients, shared_client
    from turbofeed.testing import LocalS3Server

    with LocalS3Server() as server:
        with S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test")) as c:
            c.boto3_client().create_bucket(Bucket=BUCKET)
        point_aws_at(server.endpoint)
        configure(S3Config(retry=RetryPolicy(max_attempts=4, base_delay=0.005, max_delay=0.05)))
        yield lambda url, data: shared_client().put(url, data)
        close_clients()
        configure(S3Config())


def test_buckets_over_s3_need_the_index_and_use_its_sizes(s3):
    prefix = f"s3://{BUCKET}/d/"
    truth = {}
    for s in range(2):
        members = []
        for i in range(8):
            h, w = (40, 40) if i % 2 else (30, 60)
            members += [(f"k{s}{i}.jpg", encode(photo(h, w, seed=10 * s + i))), (f"k{s}{i}.cls", b"1")]
            truth[f"k{s}{i}"] = (h, w)
        s3(f"{prefix}s-{s}.tar", tar_bytes(members))

    def loader() -> turbofeed.DataLoader:
        return turbofeed.DataLoader(turbofeed.Dataset(prefix, streaming=False), batch_size=4, buckets=BUCKETS,
                                    transform=Compose([BucketResize(BUCKETS)]),
                                    return_keys=True, num_workers=2)

    with pytest.raises(DatasetError, match=r"s-0\.tar.*turbofeed index"):
        loader()
    build_index(prefix, progress=False)
    seen = []
    for images, _, keys in loader():
        names = [k.rsplit("/", 1)[-1] for k in keys]
        assert {truth[k] for k in names} == {(40, 40) if images.shape[2:] == (32, 32) else (30, 60)}
        seen += names
    assert sorted(seen) == sorted(truth)
