"""Streaming with resample=True over s3:// shards on a real S3-compatible server (moto, on
127.0.0.1), with a node cache that holds 30% of the data: an epoch of 2e9 samples starts at
once and resumes exactly; an epoch that draws every shard several times stays within the
cache (each shard held for its block only), without a sample read by a ranged GET."""

from __future__ import annotations

import resource
import time
from collections import Counter

import pytest
from builders import CacheWatch, keys_of, upload_shards

pytest.importorskip("moto")
pytest.importorskip("boto3")

import turbofeed  # noqa: E402

BUCKET = "tf-stream-rs"
SHARDS, PER_SHARD = 16, 10
PREFIX = f"s3://{BUCKET}/train/"


@pytest.fixture(scope="module")
def data(server) -> dict:
    """16 shards of 10 samples uploaded under ``PREFIX``; their bytes and keys."""
    return upload_shards(server.endpoint, PREFIX, SHARDS, PER_SHARD)


def loader(config, cache_dir, epoch_size=None, **kw):
    data = turbofeed.Dataset(PREFIX, storage=config, cache_dir=str(cache_dir), streaming=True)
    return turbofeed.DataLoader(turbofeed.mix([data], resample=True, epoch_size=epoch_size),
                                batch_size=8, num_workers=2,
                                transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]),
                                return_keys=True, shuffle=True, **kw)


def watched_epoch(dl, cache_dir) -> tuple[list[str], int, float, int]:
    """One epoch of ``dl`` (node cache under ``cache_dir``): its keys, the cache's peak
    bytes, the seconds it took and the samples read with a ranged GET (cache misses)."""
    before = dl.dataset.storage_stats()["cache_misses"]
    watch = CacheWatch(str(cache_dir / "s3"))
    t = time.perf_counter()
    try:
        got = keys_of(dl)
    finally:
        peak = watch.stop()
    took = time.perf_counter() - t
    return got, peak, took, dl.dataset.storage_stats()["cache_misses"] - before


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
    got, peak, took, misses = watched_epoch(dl, tmp_path)
    counts = Counter(got)
    assert len(got) == 4 * SHARDS * PER_SHARD and set(counts) <= set(data["keys"])
    assert len(counts) > 0.8 * len(data["keys"]) and max(counts.values()) >= 2  # drawn with replacement
    # every shard is drawn ~4 times over the epoch: held for its block only, never from its
    # first draw to its last, so the cache has room and no sample waits its way to a GET
    assert misses == 0, misses
    assert peak <= config.cache_max_bytes + 2 * data["shard_bytes"], (peak, config.cache_max_bytes)
    assert took < 20, took  # the old code waited 5 s for room, shard after shard
    dl.close()


def test_a_weighted_epoch_of_several_passes_stays_within_the_cache(config, data, tmp_path):
    # without resampling, epoch_size = 4 passes: every shard is in 4 blocks of the epoch
    dl = turbofeed.DataLoader(turbofeed.mix([turbofeed.Dataset(PREFIX, storage=config, cache_dir=str(tmp_path), streaming=True)], [1.0], epoch_size=4 * SHARDS * PER_SHARD),
                              batch_size=8,
                              num_workers=2, shuffle=True,
                              transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]),
                              return_keys=True)
    got, peak, took, misses = watched_epoch(dl, tmp_path)
    assert Counter(got) == Counter(data["keys"] * 4)  # exactly 4 passes
    assert misses == 0, misses  # each shard held for its block
    assert peak <= config.cache_max_bytes + 2 * data["shard_bytes"], (peak, config.cache_max_bytes)
    assert took < 20, took
    dl.close()
