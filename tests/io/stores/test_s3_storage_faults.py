"""s3:// storage faults in the middle of an epoch, on a real S3-compatible server (moto, on
127.0.0.1) behind a fault-injecting proxy: an outage longer than the retry policy and an
object replaced during the pass are not bad data. The pass stops with a StorageError naming
the shard, in every on_error mode (they used to become an epoch of duplicates), its threads
stop, and a state taken before resumes exactly once the storage is back."""

from __future__ import annotations

import gc
import threading
import time

import pytest
from builders import small_jpeg, write_tar

pytest.importorskip("moto")
pytest.importorskip("boto3")

import turbofeed  # noqa: E402
from turbofeed.io.retry import RetryPolicy  # noqa: E402
from turbofeed.io.stores.client import S3Client  # noqa: E402
from turbofeed.io.stores.config import S3Config  # noqa: E402
from turbofeed.io.stores.urls import close_clients  # noqa: E402
from turbofeed.testing import FaultProxy, LocalS3Server  # noqa: E402

BUCKET = "tf-faults"
PREFIX = f"s3://{BUCKET}/data/"
SHARDS, PER_SHARD, BATCH = 3, 12, 4
SHORT_RETRY = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005)  # gives up within ms


def _members(first: int, count: int, seed: int = 0) -> list[tuple[str, bytes]]:
    out = []
    for i in range(first, first + count):
        out += [(f"{i:06d}.jpg", small_jpeg(seed + i)), (f"{i:06d}.cls", str(i % 5).encode())]
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalS3Server() as srv:
        client = S3Client(S3Config(endpoint_url=srv.endpoint, access_key_id="test", secret_access_key="test"))
        client.boto3_client().create_bucket(Bucket=BUCKET)
        folder = tmp_path_factory.mktemp("s3-faults")
        for s in range(SHARDS):
            path = write_tar(str(folder / f"shard-{s}.tar"), _members(s * PER_SHARD, PER_SHARD))
            with open(path, "rb") as f:
                client.put(f"{PREFIX}shard-{s}.tar", f.read())
        client.close()
        yield srv


@pytest.fixture
def proxy(server, point_aws_at):
    point_aws_at(server.endpoint)
    with FaultProxy(server.endpoint) as p:
        yield p
    gc.collect()
    close_clients()


def _config(proxy: FaultProxy) -> S3Config:
    # cache_max_bytes=1: no copy fits the node cache, every sample is a ranged GET through the proxy
    return S3Config(endpoint_url=proxy.endpoint, access_key_id="test", secret_access_key="test",
                    cache_max_bytes=1, retry=SHORT_RETRY)


def _loader(proxy, tmp_path, **kw) -> turbofeed.DataLoader:
    kw.setdefault("shuffle", True)
    return turbofeed.DataLoader(turbofeed.Dataset(PREFIX, storage=_config(proxy), cache_dir=str(tmp_path / "cache")),
                                batch_size=BATCH, num_workers=2, prefetch=1, seed=5,
                                transform=turbofeed.transforms.imagenet_eval(32),
                                return_keys=True, **kw)


def _keys(batch) -> list[str]:
    return [k.rsplit("/", 1)[-1] for k in batch[2]]


def _loader_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("turbofeed-")}


@pytest.mark.parametrize("on_error", ["replace", "skip", "raise"])
def test_an_outage_longer_than_the_retry_policy_raises_and_a_state_before_it_resumes_exactly(
        proxy, tmp_path, on_error):
    full = [k for batch in _loader(proxy, tmp_path) for k in _keys(batch)]
    assert len(full) == len(set(full)) == SHARDS * PER_SHARD
    threads_before = _loader_threads()
    loader = _loader(proxy, tmp_path, on_error=on_error)
    it = iter(loader)
    k = 2
    seen = [key for _ in range(k) for key in _keys(next(it))]
    state = loader.state_dict()
    proxy.rates["slowdown"] = 1.0  # every request answered 503 SlowDown from now on
    with pytest.raises(turbofeed.StorageError, match="gave up after 3 attempts") as info:
        for batch in it:
            seen += _keys(batch)
    assert info.value.shard.startswith(PREFIX) and str(info.value).startswith(f"storage: {PREFIX}shard-")
    assert len(seen) == len(set(seen)) and set(seen) <= set(full)  # nothing delivered twice
    assert not loader.stats.errors and loader.stats.replaced == 0
    deadline = time.monotonic() + 10
    while _loader_threads() - threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _loader_threads() - threads_before  # the pass stopped its threads
    proxy.rates["slowdown"] = 0.0  # storage is back
    resumed = _loader(proxy, tmp_path, on_error=on_error)
    resumed.load_state_dict(state)
    assert [key for batch in resumed for key in _keys(batch)] == full[k * BATCH:]


@pytest.mark.parametrize("on_error", ["replace", "skip", "raise"])
def test_an_object_replaced_mid_epoch_raises_instead_of_becoming_duplicates(server, proxy, tmp_path, on_error):
    loader = _loader(proxy, tmp_path, shuffle=False, on_error=on_error)
    it = iter(loader)
    seen = _keys(next(it))
    url = f"{PREFIX}shard-2.tar"
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test"))
    client.put(url, write_tar_bytes(tmp_path, _members(900, PER_SHARD, seed=77)))  # other bytes, new ETag
    try:
        with pytest.raises(turbofeed.StorageError, match=f"{url}: replaced since it was indexed") as info:
            for batch in it:
                seen += _keys(batch)
        assert info.value.shard == url
        assert seen == [f"{i:06d}" for i in range(2 * PER_SHARD)]  # every sample before it, once
        assert not loader.stats.errors and loader.stats.replaced == 0
        again = [k for batch in _loader(proxy, tmp_path, shuffle=False) for k in _keys(batch)]
        assert again[2 * PER_SHARD:] == [f"{i:06d}" for i in range(900, 900 + PER_SHARD)]  # a new loader reads it
    finally:  # the module's other tests expect the original shard
        client.put(url, write_tar_bytes(tmp_path, _members(2 * PER_SHARD, PER_SHARD)))
        client.close()


def write_tar_bytes(tmp_path, members) -> bytes:
    path = write_tar(str(tmp_path / "upload.tar"), members)
    with open(path, "rb") as f:
        return f.read()
