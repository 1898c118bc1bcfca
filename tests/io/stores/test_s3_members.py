"""io.stores.shards: every member of an ``s3://`` WebDataset sample, through a real S3 server
(moto on 127.0.0.1): from the node cache's copy, or with one ranged GET of exactly the
member when the cache has no room; an index cached by the old version is rebuilt."""

from __future__ import annotations

import gc
import json
import os

import pytest

pytest.importorskip("moto")
pytest.importorskip("boto3")

from turbofeed.io import IndexedDataset, pick_member  # noqa: E402
from turbofeed.io.local.index import INDEX_VERSION  # noqa: E402
from turbofeed.io.retry import RetryPolicy  # noqa: E402
from turbofeed.io.stores.client import S3Client  # noqa: E402
from turbofeed.io.stores.config import S3Config, configure  # noqa: E402
from turbofeed.io.stores.urls import close_clients  # noqa: E402
from turbofeed.testing import LocalS3Server  # noqa: E402

BUCKET = "tf-members"
FAST_RETRY = RetryPolicy(max_attempts=12, base_delay=0.005, max_delay=0.05)


@pytest.fixture(scope="module")
def server():
    with LocalS3Server() as srv:
        client = S3Client(S3Config(endpoint_url=srv.endpoint, access_key_id="test",
                                   secret_access_key="test"))
        client.boto3_client().create_bucket(Bucket=BUCKET)
        client.close()
        yield srv


@pytest.fixture(autouse=True)
def aws_env(server, point_aws_at):
    point_aws_at(server.endpoint)
    configure(S3Config(retry=FAST_RETRY))
    yield
    gc.collect()
    close_clients()
    configure(S3Config())


@pytest.fixture
def uploaded(server, laion_shards) -> tuple[list[str], dict[str, dict[str, bytes]]]:
    """The two LAION-style shards under s3://tf-members/laion/."""
    paths, by_key = laion_shards
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test",
                               secret_access_key="test"))
    urls = []
    for path in paths:
        url = f"s3://{BUCKET}/laion/{os.path.basename(path)}"
        with open(path, "rb") as f:
            client.put(url, f.read())
        urls.append(url)
    client.close()
    return urls, by_key


def _check_members(ds: IndexedDataset, by_key: dict[str, dict[str, bytes]]) -> None:
    assert len(ds) == 12
    for gid in range(len(ds)):
        _, key = ds.describe(gid)
        assert ds.member_exts(gid) == tuple(by_key[key])
        for ext, payload in by_key[key].items():
            assert ds.read_member(gid, ext) == payload
        assert ds.read_member(gid, "seg.png") is None
        if "json" not in by_key[key]:
            assert ds.read_member(gid, "json") is None
        assert ds.read(gid) == by_key[key][pick_member(ds.member_exts(gid), "jpg;png;webp")]


def test_members_from_the_node_cache(uploaded):
    urls, by_key = uploaded
    ds = IndexedDataset(urls)
    assert ds.storage_stats()["shards_downloaded"] == 2
    hits = ds.storage_stats()["cache_hits"]
    _check_members(ds, by_key)
    stats = ds.storage_stats()
    assert stats["cache_misses"] == 0 and stats["cache_hits"] > hits
    ds.close()


def test_members_with_ranged_gets_when_the_cache_has_no_room(uploaded):
    """Cache bound of 1 byte: indexed from temporary copies, every member one ranged GET;
    a member the sample does not have costs no request."""
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=1))
    urls, by_key = uploaded
    ds = IndexedDataset(urls)
    assert ds.s3 is not None and not ds.s3.prefetch
    before = ds.storage_stats()
    _check_members(ds, by_key)
    after = ds.storage_stats()
    assert after["cache_hits"] == before["cache_hits"] and after["cache_misses"] > before["cache_misses"]
    requests = after["requests"]
    assert ds.read_member(3, "json") is None and ds.read_member(0, "cls") is None
    assert ds.storage_stats()["requests"] == requests
    ds.close()


def test_an_s3_index_cached_by_the_old_version_is_rebuilt(uploaded, tmp_path):
    urls, by_key = uploaded
    IndexedDataset(urls[0]).close()
    index_dir = tmp_path / "cache" / "s3-index"
    (name,) = os.listdir(index_dir)
    with open(index_dir / name) as f:
        fresh = json.load(f)
    assert fresh["version"] == INDEX_VERSION and len(fresh["members"]) == 6
    old = {k: v for k, v in fresh.items() if k != "members"}
    old["version"] = INDEX_VERSION - 1
    with open(index_dir / name, "w") as f:
        json.dump(old, f)
    close_clients()
    ds = IndexedDataset(urls[0])
    assert ds.read_member(0, "json") == by_key[ds.describe(0)[1]]["json"]
    with open(index_dir / name) as f:
        assert json.load(f)["version"] == INDEX_VERSION
    ds.close()


@pytest.mark.parametrize("cache_max_bytes", [None, 1])
def test_label_members_over_64_kib_are_read_when_the_dataset_opens(server, tmp_path, cache_max_bytes):
    """A label member larger than the index inlines: read from the node cache's copy, or
    with a ranged GET when the cache has no room, when a loader of labels opens."""
    from builders import small_jpeg, tar_bytes

    if cache_max_bytes is not None:
        configure(S3Config(retry=FAST_RETRY, cache_max_bytes=cache_max_bytes))
    members = []
    for i in range(3):
        ann = {"label": i + 4, "annotations": ["x" * 1000] * 80}
        members += [(f"a{i}.jpg", small_jpeg(i)), (f"a{i}.json", json.dumps(ann).encode())]
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test"))
    url = f"s3://{BUCKET}/big/big-{cache_max_bytes}.tar"
    client.put(url, tar_bytes(members))
    client.close()
    ds = IndexedDataset(url)
    assert ds.labels.tolist() == [4, 5, 6] and ds.bad == {}
    assert json.loads(ds.read_member(1, "json"))["label"] == 5
    ds.close()
