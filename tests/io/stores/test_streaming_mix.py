"""A streamed epoch over a real S3-compatible server (moto, on 127.0.0.1) whose batches mix
several blocks (issue 29, item 3): 12 shards, a node cache of 6 of them, every sample once,
each shard downloaded once, no sample read with a ranged GET, the cache within its bound,
and batches drawn from about 5 shards where the blocks of half the cache gave about 3;
exact resume mid-epoch, and a state saved before the overlap resumes in its own order."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from builders import FAST_RETRY, CacheWatch, keys_of, upload_shards

pytest.importorskip("moto")
pytest.importorskip("boto3")

import turbofeed  # noqa: E402
from turbofeed.engine import layout as layout_module  # noqa: E402
from turbofeed.io.stores.config import S3Config  # noqa: E402

BUCKET = "tf-stream-mix"
SHARDS, PER_SHARD, BATCH = 12, 48, 8
PREFIX = f"s3://{BUCKET}/train/"


@pytest.fixture(scope="module")
def data(server) -> dict:
    return upload_shards(server.endpoint, PREFIX, SHARDS, PER_SHARD)


@pytest.fixture
def six_shards(server, data, point_aws_at):
    """A node cache of 6 shards' bytes (the largest, so that 6 whole shards fit)."""
    from turbofeed.io.stores.client import S3Client
    from turbofeed.io.stores.urls import close_clients

    point_aws_at(server.endpoint)
    largest = max(o.size for o in S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test",
                                                    secret_access_key="test")).list(PREFIX))
    yield S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test",
                   cache_max_bytes=6 * largest, retry=FAST_RETRY), largest
    close_clients()


def epoch(config: S3Config, cache_dir, seed: int = 0):
    dl = turbofeed.DataLoader(turbofeed.Dataset(PREFIX, storage=config, cache_dir=str(cache_dir), streaming=True),
                              batch_size=BATCH, num_workers=2, shuffle=True, seed=seed, return_keys=True,
                              transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]))
    before = dl.dataset.storage_stats()
    watch = CacheWatch(str(cache_dir / "s3"))
    try:
        batches = [keys_of([b]) for b in dl]
    finally:
        peak = watch.stop()
    after = dl.dataset.storage_stats()
    lay = dl.stream_layout
    dl.close()
    diff = {k: after[k] - before[k] for k in ("shards_downloaded", "cache_misses")}
    return lay, batches, peak, diff


def shards_per_batch(batches: list[list[str]]) -> float:
    full = [b for b in batches if len(b) == BATCH]
    return float(np.mean([len({k.split("-")[0] for k in b}) for b in full]))


def test_a_streamed_epoch_mixes_five_shards_per_batch_within_a_cache_of_six(six_shards, data, tmp_path,
                                                                             monkeypatch):
    config, largest = six_shards
    lay, batches, peak, diff = epoch(config, tmp_path / "a")
    assert lay.overlap == 5 and lay.block_bytes >= largest
    got = [k for b in batches for k in b]
    assert Counter(got) == Counter(data["keys"])  # every sample exactly once
    # each shard at most once (some of those indexed at construction may still be cached)
    assert diff["shards_downloaded"] <= SHARDS
    assert diff["cache_misses"] == 0  # no sample waited its way to a ranged GET
    assert peak <= config.cache_max_bytes + largest, (peak, config.cache_max_bytes)  # + one .part in tmp
    mixed = shards_per_batch(batches)

    # the blocks of half the cache, as before the overlap: the same epoch, fewer shards per batch
    monkeypatch.setattr(layout_module, "MAX_OVERLAP", 1)
    plain, before, _, _ = epoch(config, tmp_path / "b")
    assert plain.overlap == 1
    assert Counter(k for b in before for k in b) == Counter(data["keys"])
    # batches of 8: about 5 (1 - (4/5)^8) = 4.2 shards from 5 mixed, 3 (1 - (2/3)^8) = 2.9 from 3
    assert mixed >= 3.8 and mixed > 1.25 * shards_per_batch(before), (mixed, shards_per_batch(before))


def make(config: S3Config, cache_dir, **kw):
    return turbofeed.DataLoader(turbofeed.Dataset(PREFIX, storage=config, cache_dir=str(cache_dir), streaming=True),
                                batch_size=BATCH, num_workers=2, shuffle=True, seed=1, return_keys=True,
                                transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]), **kw)


def test_resume_mid_epoch_of_overlapping_blocks_continues_exactly(six_shards, data, tmp_path):
    config, _ = six_shards
    whole = keys_of(make(config, tmp_path / "a"))
    dl = make(config, tmp_path / "b")
    it = iter(dl)
    head = keys_of([next(it) for _ in range(23)])
    state = dl.state_dict()
    assert state["overlap"] == 5
    dl.close()
    again = make(config, tmp_path / "c")
    again.load_state_dict(state)
    assert head + keys_of(again) == whole


def test_a_state_saved_before_overlap_resumes_in_its_own_order(six_shards, data, tmp_path, monkeypatch):
    """A streamed state saved before the overlap existed has no ``overlap`` field; its
    order was the block shuffle (overlap 1, blocks of half the cache). The loader of this
    version, which would mix 5 blocks, resumes it in that order: the rest is exactly what
    the interrupted run would have delivered."""
    config, _ = six_shards
    monkeypatch.setattr(layout_module, "MAX_OVERLAP", 1)  # a loader that orders as before
    before = make(config, tmp_path / "a")
    assert before.stream_layout.block_bytes == config.cache_max_bytes // 2
    whole = keys_of(before)
    old = make(config, tmp_path / "b")
    it = iter(old)
    head = keys_of([next(it) for _ in range(17)])
    state = {k: v for k, v in old.state_dict().items() if k != "overlap"}  # as saved then
    old.close()
    monkeypatch.undo()
    now = make(config, tmp_path / "c")
    assert now.stream_layout.overlap == 5
    now.load_state_dict(state)
    assert now.stream_layout.overlap == 1 and now.stream_layout.block_bytes == state["block_bytes"]
    assert head + keys_of(now) == whole
