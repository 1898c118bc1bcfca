"""``https://``, ``az://`` and ``gs://`` shards read as ``s3://`` ones are, against real
servers on 127.0.0.1 (conftest.py): a full epoch equal to the local shards', a streamed
epoch through a small node cache, exact resume mid-epoch, and an outage mid-epoch that
raises StorageError naming the shard (never bad samples)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from builders import small_jpeg, tar_bytes
from conftest import PER_SHARD, SHARDS, replace_object

import turbofeed
from turbofeed.io.retry import RetryPolicy

pytest.importorskip("obstore")  # the one reader of these stores
torch = pytest.importorskip("torch")

SHORT_RETRY = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005)


def loader(data, cache_dir, config=None, streaming=None, **kw) -> turbofeed.DataLoader:
    kw.setdefault("shuffle", True)
    data = turbofeed.Dataset(data, storage=config, cache_dir=str(cache_dir), streaming=streaming)
    return turbofeed.DataLoader(data, batch_size=4,
                                num_workers=2, seed=3,
                                transform=turbofeed.transforms.imagenet_eval(16), return_keys=True, **kw)


def keys(batches) -> list[str]:
    return [k.rsplit("/", 1)[-1] for batch in batches for k in batch[2]]


def test_a_full_epoch_equals_the_same_shards_read_locally(served, local_shards, tmp_path):
    remote = loader(served.spec, tmp_path / "r", served.config(), shuffle=False)
    local = loader(os.path.join(local_shards["folder"], f"shard-{{0000..{SHARDS - 1:04d}}}.tar"),
                   tmp_path / "l", shuffle=False)
    got, want = list(remote), list(local)
    assert keys(got) == keys(want) and len(keys(got)) == SHARDS * PER_SHARD
    for a, b in zip(got, want):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert remote.dataset.storage_stats()["requests"] > 0
    remote.close()
    local.close()


def test_a_streamed_epoch_through_a_small_cache_reads_every_sample_once(served, local_shards, tmp_path):
    config = served.config(cache_max_bytes=max(int(0.4 * local_shards["bytes"]), 2 * local_shards["largest"]))
    dl = loader(served.spec, tmp_path, config, streaming=True)
    assert dl.stream_layout is not None
    before = dl.dataset.storage_stats()
    got = keys(dl)
    after = dl.dataset.storage_stats()
    assert Counter(got) == Counter(f"s{s}-{i:02d}" for s in range(SHARDS) for i in range(PER_SHARD))
    assert SHARDS - 2 <= after["shards_downloaded"] - before["shards_downloaded"] <= SHARDS
    assert after["cache_misses"] == before["cache_misses"]  # whole shards, no sample-sized GET
    dl.close()


def test_resume_mid_epoch_continues_exactly(served, local_shards, tmp_path):
    config = served.config(cache_max_bytes=max(int(0.4 * local_shards["bytes"]), 2 * local_shards["largest"]))
    whole = keys(loader(served.spec, tmp_path / "a", config, streaming=True))
    dl = loader(served.spec, tmp_path / "b", config, streaming=True)
    it = iter(dl)
    head = keys([next(it) for _ in range(5)])
    state = dl.state_dict()
    dl.close()
    again = loader(served.spec, tmp_path / "c", config, streaming=True)
    again.load_state_dict(state)
    assert head + keys(again) == whole


@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_an_outage_mid_epoch_raises_storage_error_naming_the_shard(served, tmp_path, on_error):
    # cache_max_bytes=1: no shard fits the node cache, every sample is a ranged GET
    dl = loader(served.spec, tmp_path, served.config(cache_max_bytes=1, retry=SHORT_RETRY),
                on_error=on_error, prefetch=1)
    it = iter(dl)
    seen = keys([next(it), next(it)])
    served.server.stop()
    with pytest.raises(turbofeed.StorageError) as info:
        for batch in it:
            seen += keys([batch])
    assert info.value.shard.startswith(served.prefix) and info.value.shard.endswith(".tar")
    assert str(info.value).startswith(f"storage: {served.prefix}shard-")
    assert len(seen) == len(set(seen)) and not dl.stats.errors and dl.stats.replaced == 0
    dl.close()


def test_a_shard_replaced_mid_epoch_raises_instead_of_mixing_versions(served, local_shards, tmp_path):
    dl = loader(served.spec, tmp_path, served.config(cache_max_bytes=1, retry=SHORT_RETRY), shuffle=False,
                prefetch=1)
    it = iter(dl)
    seen = keys([next(it)])
    last = local_shards["names"][-1]
    other = tar_bytes([(f"new-{i:02d}.jpg", small_jpeg(999 + i)) for i in range(PER_SHARD)])
    replace_object(served, last, other)
    with pytest.raises(turbofeed.StorageError) as info:
        for batch in it:
            seen += keys([batch])
    assert info.value.shard == served.prefix + last and "replaced" in info.value.reason
    assert not any(k.startswith("new-") for k in seen)
    dl.close()
