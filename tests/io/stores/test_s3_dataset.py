"""io.stores.shards: s3:// shards through a real S3-compatible server (moto, on 127.0.0.1) give the
same samples as the local copies: listing, indexes, node cache, prefetch, injected
faults and a server restart in the middle of an epoch."""

from __future__ import annotations

import gc
import os
import shutil
import threading
import time
from collections import Counter

import pytest
from builders import FAST_RETRY

pytest.importorskip("moto")
pytest.importorskip("boto3")

import turbofeed  # noqa: E402
from turbofeed.errors import DatasetError  # noqa: E402
from turbofeed.io import IndexedDataset  # noqa: E402
from turbofeed.io.retry import RemoteError, RetryPolicy  # noqa: E402
from turbofeed.io.stores.client import S3Client  # noqa: E402
from turbofeed.io.stores.config import S3Config, configure  # noqa: E402
from turbofeed.io.stores.urls import close_clients  # noqa: E402
from turbofeed.testing import FaultProxy  # noqa: E402

BUCKET = "tf-data"


@pytest.fixture(scope="module")
def uploaded(server, shard_paths) -> list[str]:
    """The session's 3 shards uploaded to s3://tf-data/shards/."""
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test",
                               secret_access_key="test"))
    client.boto3_client().create_bucket(Bucket=BUCKET)
    urls = []
    for path in shard_paths:
        url = f"s3://{BUCKET}/shards/{os.path.basename(path)}"
        with open(path, "rb") as f:
            client.put(url, f.read())
        urls.append(url)
    client.close()
    return urls


@pytest.fixture(autouse=True)
def aws_env(server, point_aws_at):
    """The usual AWS variables point at the local server; a fresh node cache per test."""
    point_aws_at(server.endpoint)
    configure(S3Config(retry=FAST_RETRY))
    yield
    gc.collect()
    close_clients()
    configure(S3Config())


def _epoch(data, **kw) -> list[tuple]:
    loader = turbofeed.DataLoader(data, batch_size=16, num_workers=3, shuffle=True, seed=3,
                                  return_keys=True, on_error="raise",
                                  transform=turbofeed.transforms.imagenet_train(48), **kw)
    out = [(images.clone(), labels.clone(), keys) for images, labels, keys in loader]
    assert loader.stats.as_dict()["errors"] == {}
    return out


def _same(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for (xa, ya, ka), (xb, yb, kb) in zip(a, b):
        assert ka == kb
        assert (ya == yb).all()
        assert (xa == xb).all()


@pytest.fixture(scope="module")
def local_epoch(shards):
    return _epoch(shards)


def test_loader_epoch_over_s3_matches_local_copies(uploaded, local_epoch):
    """Same keys, labels and pixels, batch by batch, from a brace pattern of s3:// URLs."""
    _same(_epoch(f"s3://{BUCKET}/shards/shard-{{000000..000002}}.tar"), local_epoch)


def test_prefix_glob_and_braces_name_the_same_shards(uploaded):
    by_prefix = IndexedDataset(f"s3://{BUCKET}/shards/")
    assert [s.path for s in by_prefix.sources] == uploaded
    assert [s.path for s in IndexedDataset(f"s3://{BUCKET}/shards").sources] == uploaded
    assert [s.path for s in IndexedDataset(f"s3://{BUCKET}/shards/*.tar").sources] == uploaded
    assert [s.path for s in IndexedDataset(uploaded[::-1]).sources] == uploaded[::-1]
    assert by_prefix.fingerprint_fields()["sources"][0][0] == "shard-000000.tar"


def test_missing_objects_and_empty_prefixes_raise_with_the_url(uploaded):
    with pytest.raises(DatasetError, match="no such object: .*shard-000003.tar.* and 4 more"):
        IndexedDataset(f"s3://{BUCKET}/shards/shard-{{000000..000009}}.tar")
    with pytest.raises(DatasetError, match="no such object.*nothing.tar"):
        IndexedDataset(f"s3://{BUCKET}/shards/nothing.tar")
    with pytest.raises(DatasetError, match="no .tar objects under this prefix"):
        IndexedDataset(f"s3://{BUCKET}/elsewhere/")
    with pytest.raises(DatasetError, match="matches no objects"):
        IndexedDataset(f"s3://{BUCKET}/shards/*.tgz")


def test_index_is_cached_by_etag_and_reads_come_from_the_node_cache(uploaded, shard_paths):
    first = IndexedDataset(uploaded)
    stats = first.storage_stats()
    assert stats["shards_downloaded"] == 3
    local = IndexedDataset(shard_paths)
    assert [first.read(g) for g in range(len(first))] == [local.read(g) for g in range(len(local))]
    assert (first.labels == local.labels).all()
    assert first.storage_stats()["cache_hits"] == len(first)
    before = first.storage_stats()["requests"]
    second = IndexedDataset(uploaded)  # index and bytes cached: one HEAD per shard (its ETag), no GET
    assert second.storage_stats()["requests"] - before == len(uploaded)
    assert second.storage_stats()["bytes_read"] == stats["bytes_read"]


def test_a_changed_object_is_indexed_again(server, uploaded, shard_paths, tmp_path):
    url = f"s3://{BUCKET}/changing/shard.tar"
    client = S3Client(S3Config(endpoint_url=server.endpoint))
    with open(shard_paths[0], "rb") as f:
        client.put(url, f.read())
    assert len(IndexedDataset(url)) == 40
    with open(shard_paths[1], "rb") as f:
        two = f.read()
    client.put(url, two[:len(two) // 2])  # new ETag and size: a cut copy of another shard
    changed = IndexedDataset(url)
    assert 0 < len(changed) < 40 and changed.damaged == [url]
    assert changed.sources[0].table.keys[0] == IndexedDataset(shard_paths[1]).sources[0].table.keys[0]
    client.close()


def test_without_room_in_the_cache_samples_are_ranged_gets(uploaded, shard_paths):
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=1))
    ds = IndexedDataset(uploaded)
    local = IndexedDataset(shard_paths)
    for g in (0, 39, 40, 119):
        assert ds.read(g) == local.read(g)
    stats = ds.storage_stats()
    assert stats["cache_hits"] == 0 and stats["cache_misses"] == 4
    assert stats["shards_downloaded"] == 0  # indexed from temporary copies, not cached


def test_prefetch_moves_reads_to_the_node_cache(uploaded, tmp_path, monkeypatch):
    """Indexes cached, shard copies gone: the first read of a shard is a GET and queues
    the shard (and the next ones) for download; later reads come from disk."""
    IndexedDataset(uploaded).close()
    shutil.rmtree(tmp_path / "cache" / "s3" / "objects")
    ds = IndexedDataset(uploaded)
    assert ds.storage_stats()["shards_downloaded"] == 3  # the earlier dataset's downloads
    assert ds.s3.prefetch
    ds.read(0)
    assert ds.storage_stats()["cache_misses"] == 1
    deadline = time.monotonic() + 10
    while ds.storage_stats()["shards_downloaded"] < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ds.storage_stats()["shards_downloaded"] == 6
    for g in range(len(ds)):  # sample 0 again too: this time from disk
        ds.read(g)
    assert ds.storage_stats()["cache_hits"] == len(ds)
    assert ds.storage_stats()["cache_misses"] == 1
    ds.close()
    assert not any(t.name.startswith("turbofeed-prefetch") for t in threading.enumerate())


@pytest.mark.parametrize("mode", ["cache", "direct"])
def test_injected_faults_lose_and_duplicate_no_sample(server, uploaded, local_epoch, mode):
    """Dropped connections, 503 SlowDown and cut bodies on a third of the requests:
    indexing, shard downloads and sample GETs retry; the epoch is exactly the local one."""
    with FaultProxy(server.endpoint, drop=0.1, slowdown=0.15, truncate=0.1, seed=7) as proxy:
        configure(S3Config(endpoint_url=proxy.endpoint, retry=FAST_RETRY,
                           cache_max_bytes=None if mode == "cache" else 1, part_size=1 << 20))
        got = _epoch(f"s3://{BUCKET}/shards/")
    _same(got, local_epoch)
    assert proxy.counts["drop"] and proxy.counts["slowdown"] and proxy.counts["truncate"]
    keys = Counter(k for _, _, batch in got for k in batch)
    assert len(keys) == 120 and set(keys.values()) == {1}


def test_server_restart_mid_epoch(server, uploaded, local_epoch):
    """The server goes away for 0.4 s after the first batch: requests in flight and
    those sent meanwhile retry with backoff; no sample is lost or repeated."""
    configure(S3Config(retry=RetryPolicy(max_attempts=12, base_delay=0.05, max_delay=0.5),
                       cache_max_bytes=1))
    loader = turbofeed.DataLoader(f"s3://{BUCKET}/shards/", batch_size=16, num_workers=3,
                                  shuffle=True, seed=3, return_keys=True, on_error="raise",
                                  transform=turbofeed.transforms.imagenet_train(48))
    got, restarter = [], None
    for images, labels, keys in loader:
        got.append((images.clone(), labels.clone(), keys))
        if restarter is None:
            restarter = threading.Thread(target=server.restart, args=(0.4,))
            restarter.start()
    restarter.join()
    _same(got, local_epoch)
    assert loader.dataset.storage_stats()["retries"] > 0


def test_retries_end_with_an_error_naming_url_and_range(server, uploaded):
    """Every request answered 503: after max_attempts the read fails with a StorageError
    naming URL and byte range (not bad data: the loader raises it whatever on_error says)."""
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=1))
    ds = IndexedDataset(uploaded[:1])
    size, offset = int(ds.sources[0].table.sizes[0]), int(ds.sources[0].table.offsets[0])
    with FaultProxy(server.endpoint, slowdown=1.0) as proxy:
        proxy.enabled = False  # the HEAD of the shard passes; its index comes from the cache
        configure(S3Config(endpoint_url=proxy.endpoint, cache_max_bytes=1,
                           retry=RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01)))
        broken = IndexedDataset(uploaded[:1])
        proxy.enabled = True
        with pytest.raises(turbofeed.StorageError) as info:
            broken.read(0)
    message = str(info.value)
    assert info.value.shard == uploaded[0] and isinstance(info.value.__cause__, RemoteError)
    assert f"storage: {uploaded[0]}: bytes {offset}-{offset + size - 1}" in message
    assert "gave up after 3 attempts" in message and ("SlowDown" in message or "503" in message)
    assert proxy.counts["slowdown"] == 3


def test_s3_config_argument_needs_no_aws_variables(server, uploaded, shard_paths, monkeypatch):
    """Endpoint and keys passed as IndexedDataset(storage=S3Config(...)) sign the requests (the
    proxy sees the key) with every AWS_* variable unset."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    with FaultProxy(server.endpoint) as proxy:
        config = S3Config(endpoint_url=proxy.endpoint, access_key_id="from-arguments",
                          secret_access_key="s", retry=FAST_RETRY, cache_max_bytes=1)
        ds = IndexedDataset(f"s3://{BUCKET}/shards/shard-{{000000..000002}}.tar", storage=config)
        assert ds.read(41) == IndexedDataset(shard_paths).read(41)
    assert proxy.access_keys == {"from-arguments"}


def test_the_loader_keeps_requests_in_flight_within_max_concurrency(server, uploaded, local_epoch):
    """6 loader threads reading samples with direct GETs (no cache room), 2 allowed at
    once: the proxy never holds more than 2, and the epoch is unchanged."""
    with FaultProxy(server.endpoint, latency=0.002) as proxy:
        configure(S3Config(endpoint_url=proxy.endpoint, retry=FAST_RETRY, cache_max_bytes=1,
                           max_concurrency=2))
        loader = turbofeed.DataLoader(f"s3://{BUCKET}/shards/", batch_size=16, num_workers=6,
                                      shuffle=True, seed=3, return_keys=True, on_error="raise",
                                      transform=turbofeed.transforms.imagenet_train(48))
        got = [(images.clone(), labels.clone(), keys) for images, labels, keys in loader]
    _same(got, local_epoch)
    assert proxy.max_in_flight == 2


def test_an_object_replaced_after_indexing_fails_clearly(server, uploaded, shard_paths):
    """Samples are read with If-Match on the indexed ETag: a replaced or deleted shard
    gives an error naming it, never bytes of another version at the old offsets."""
    url = f"s3://{BUCKET}/replaced/shard.tar"
    client = S3Client(S3Config(endpoint_url=server.endpoint))
    with open(shard_paths[0], "rb") as f:
        client.put(url, f.read())
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=1))
    ds = IndexedDataset(url)
    local = IndexedDataset(shard_paths[0])
    assert ds.read(3) == local.read(3)
    with open(shard_paths[1], "rb") as f:
        client.put(url, f.read())
    with pytest.raises(turbofeed.StorageError, match=f"{url}: replaced since it was indexed"):
        ds.read(4)
    client.delete(url)
    with pytest.raises(turbofeed.StorageError, match=f"{url}: deleted since it was indexed"):
        ds.read(5)
    with pytest.raises(DatasetError, match=f"no such object: {url}"):
        IndexedDataset(url)
