"""Streaming with resample=True over s3:// shards on a real S3-compatible server (moto, on
127.0.0.1), with a node cache that holds 30% of the data: an epoch of 2e9 samples starts at
once and resumes exactly; an epoch that draws every shard several times stays within the
cache (each shard held for its block only), without a sample read by a ranged GET."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import Counter

import pytest
from builders import small_jpeg, write_tar

pytest.importorskip("moto")
pytest.importorskip("boto3")

import turbofeed  # noqa: E402
from turbofeed.io.retry import RetryPolicy  # noqa: E402
from turbofeed.io.s3.client import S3Client  # noqa: E402
from turbofeed.io.s3.config import S3Config  # noqa: E402
from turbofeed.io.s3.urls import close_clients  # noqa: E402
from turbofeed.testing import LocalS3Server  # noqa: E402

BUCKET = "tf-stream-rs"
SHARDS, PER_SHARD = 16, 10
PREFIX = f"s3://{BUCKET}/train/"
FAST_RETRY = RetryPolicy(max_attempts=12, base_delay=0.005, max_delay=0.05)


@pytest.fixture(scope="module")
def server():
    with LocalS3Server() as srv:
        yield srv


@pytest.fixture(scope="module")
def data(server, tmp_path_factory) -> dict:
    """16 shards of 10 samples uploaded under ``PREFIX``; their bytes and keys."""
    out = tmp_path_factory.mktemp("shards")
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test"))
    client.boto3_client().create_bucket(Bucket=BUCKET)
    total, keys = 0, []
    for s in range(SHARDS):
        members = []
        for i in range(PER_SHARD):
            key = f"s{s:02d}-{i:03d}"
            keys.append(key)
            members += [(f"{key}.jpg", small_jpeg(1000 * s + i)), (f"{key}.cls", str(s % 4).encode())]
        path = write_tar(str(out / f"shard-{s:04d}.tar"), members)
        body = open(path, "rb").read()
        total += len(body)
        client.put(f"{PREFIX}shard-{s:04d}.tar", body)
    client.close()
    return {"bytes": total, "keys": keys, "shard_bytes": total // SHARDS}


@pytest.fixture
def config(server, data, point_aws_at):
    point_aws_at(server.endpoint)
    yield S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test",
                   cache_max_bytes=int(0.3 * data["bytes"]), retry=FAST_RETRY)
    close_clients()


def loader(config, cache_dir, **kw):
    return turbofeed.DataLoader(PREFIX, batch_size=8, num_workers=2, s3=config, cache_dir=str(cache_dir),
                                transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]),
                                return_keys=True, shuffle=True, streaming=True, resample=True, **kw)


def keys_of(batches) -> list[str]:
    return [k.rsplit("/", 1)[-1] for batch in batches for k in batch[2]]


class CacheWatch:
    """The largest number of bytes under the node cache's object and tmp folders, sampled."""

    def __init__(self, root: str) -> None:
        self.root, self.peak, self._stop = root, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            used = 0
            for sub in ("objects", "tmp"):
                try:
                    for e in os.scandir(os.path.join(self.root, sub)):
                        if not e.name.endswith(".lock"):
                            try:
                                used += e.stat().st_blocks * 512 if e.name.endswith(".part") else e.stat().st_size
                            except FileNotFoundError:
                                pass
                except FileNotFoundError:
                    pass
            self.peak = max(self.peak, used)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def test_a_two_billion_sample_resampled_stream_starts_at_once_and_resumes_exactly(config, data, tmp_path):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    dl = loader(config, tmp_path / "a", epoch_size=2_000_000_000)
    it = iter(dl)
    head = keys_of([next(it) for _ in range(5)])
    took = time.perf_counter() - t
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    assert len(dl) == 250_000_000 and dl.stream_layout is not None
    assert took < 30 and grown_mib < 300, (took, grown_mib)  # loose: the old code built 16 GB of ids first
    assert set(head) <= set(data["keys"]) and len(set(head)) > 10
    state = dl.state_dict()
    tail = keys_of([next(it) for _ in range(4)])
    dl.close()

    again = loader(config, tmp_path / "b", epoch_size=2_000_000_000)
    assert keys_of([b for _, b in zip(range(5), again)]) == head  # deterministic
    resumed = loader(config, tmp_path / "c", epoch_size=2_000_000_000)
    resumed.load_state_dict(state)
    assert keys_of([b for _, b in zip(range(4), resumed)]) == tail  # exact resume mid-epoch
    again.close()
    resumed.close()


def test_an_epoch_drawing_each_shard_many_times_stays_within_the_cache(config, data, tmp_path):
    dl = loader(config, tmp_path, epoch_size=4 * SHARDS * PER_SHARD)
    before = dl.dataset.storage_stats()
    watch = CacheWatch(str(tmp_path / "s3"))
    t = time.perf_counter()
    try:
        got = keys_of(dl)
    finally:
        peak = watch.stop()
    took = time.perf_counter() - t
    after = dl.dataset.storage_stats()
    counts = Counter(got)
    assert len(got) == 4 * SHARDS * PER_SHARD and set(counts) <= set(data["keys"])
    assert len(counts) > 0.8 * len(data["keys"]) and max(counts.values()) >= 2  # drawn with replacement
    # every shard is drawn ~4 times over the epoch: held for its block only, never from its
    # first draw to its last, so the cache has room and no sample waits its way to a GET
    assert after["cache_misses"] == before["cache_misses"], (after, before)
    assert peak <= config.cache_max_bytes + 2 * data["shard_bytes"], (peak, config.cache_max_bytes)
    assert took < 20, took  # the old code waited 5 s for room, shard after shard
    dl.close()


def test_a_weighted_epoch_of_several_passes_stays_within_the_cache(config, data, tmp_path):
    # without resampling, epoch_size = 4 passes: every shard is in 4 blocks of the epoch
    dl = turbofeed.DataLoader([PREFIX], weights=[1.0], epoch_size=4 * SHARDS * PER_SHARD, batch_size=8,
                              num_workers=2, s3=config, cache_dir=str(tmp_path), streaming=True, shuffle=True,
                              transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]),
                              return_keys=True)
    before = dl.dataset.storage_stats()
    watch = CacheWatch(str(tmp_path / "s3"))
    t = time.perf_counter()
    try:
        got = keys_of(dl)
    finally:
        peak = watch.stop()
    took = time.perf_counter() - t
    after = dl.dataset.storage_stats()
    assert Counter(got) == Counter(data["keys"] * 4)  # exactly 4 passes
    assert after["cache_misses"] == before["cache_misses"], (after, before)  # each shard held for its block
    assert peak <= config.cache_max_bytes + 2 * data["shard_bytes"], (peak, config.cache_max_bytes)
    assert took < 20, took
    dl.close()
