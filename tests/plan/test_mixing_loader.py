"""Weighted mixing of datasets and resampled epochs through the DataLoader, on real tar
shards: exact shares per dataset, deterministic per (seed, epoch), resumable, streamed."""

from __future__ import annotations

import os
import zlib
from collections import Counter

import pytest
from builders import small_jpeg, write_tar
from resume_check import check_resume

import turbofeed
from turbofeed import transforms as T


def shards(folder, name: str, count: int, per_shard: int) -> str:
    os.makedirs(folder, exist_ok=True)
    for s in range(count):
        members = []
        for i in range(per_shard):
            key = f"{name}{s}-{i:03d}"
            members += [(f"{key}.jpg", small_jpeg(zlib.crc32(key.encode()) % 10_000)), (f"{key}.cls", b"1" if name == "b" else b"0")]
        write_tar(os.path.join(folder, f"{name}-{s:03d}.tar"), members)
    return str(folder)


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("mix")
    return shards(root / "a", "a", 4, 10), shards(root / "b", "b", 2, 10)  # 40 and 20 samples


def load(data, *, weights=None, epoch_size=None, resample=False, streaming=None, **kw):
    """A loader of ``data`` (paths; with ``weights``, one dataset per path) mixed as asked."""
    kw.setdefault("shuffle", True)
    paths = [data] if isinstance(data, str) else list(data)
    if weights is not None:
        data = turbofeed.mix([turbofeed.Dataset(p, streaming=streaming) for p in paths], weights,
                             epoch_size=epoch_size, resample=resample)
    elif epoch_size is not None or resample:
        data = turbofeed.mix([turbofeed.Dataset(data, streaming=streaming)], epoch_size=epoch_size,
                             resample=resample)
    else:
        data = turbofeed.Dataset(data, streaming=streaming)
    return turbofeed.DataLoader(data, batch_size=8, num_workers=2, return_keys=True,
                                transform=T.Compose([T.Resize(16)]), **kw)


def keys(loader) -> list[str]:
    return [k.rsplit("/", 1)[-1] for batch in loader for k in batch[2]]


def test_weights_give_each_dataset_its_exact_share(two):
    dl = load(list(two), weights=[1, 3], epoch_size=40, drop_last=False)
    assert len(dl) == 5
    got = keys(dl)
    count = Counter(k[0] for k in got)
    assert count == {"a": 10, "b": 30}
    a = Counter(k for k in got if k[0] == "a")
    b = Counter(k for k in got if k[0] == "b")
    assert max(a.values()) == 1                    # a's 10 of 40: no repeats
    assert set(b.values()) == {1, 2} and len(b) == 20  # b's 30 of 20: each once or twice
    again = keys(dl)
    assert again != got and Counter(k[0] for k in again) == count  # next epoch: a new draw, same shares


def test_weights_are_deterministic_and_labels_follow_the_samples(two):
    first = load(list(two), weights=[1, 1], seed=5)
    second = load(list(two), weights=[1, 1], seed=5)
    batches = list(first)
    assert [k.rsplit("/", 1)[-1] for b in batches for k in b[2]] == keys(second)
    for images, labels, ks in batches:
        for label, k in zip(labels.tolist(), ks):
            assert label == (1 if k.rsplit("/", 1)[-1][0] == "b" else 0)
    assert keys(load(list(two), weights=[1, 1], seed=6)) != keys(second)


def test_weights_must_match_the_data_list(two):
    with pytest.raises(ValueError, match="one number per dataset"):
        load(list(two), weights=[1, 2, 3])
    with pytest.raises(ValueError, match="epoch_size"):
        load(list(two), epoch_size=0)


def test_resampled_epochs_draw_shards_with_replacement(two):
    dl = load(two[0], resample=True, epoch_size=30)
    assert len(dl) == 4
    e0, e1 = keys(dl), keys(dl)
    assert len(e0) == len(e1) == 30 and e0 != e1
    shards_seen = Counter(k.split("-")[0] for k in e0)
    assert sum(shards_seen.values()) == 30
    dl.set_epoch(0)
    assert keys(dl) == e0  # a pure function of (seed, epoch)


def test_a_mixed_epoch_resumes_exactly(two):
    (run,) = check_resume(lambda: load(list(two), weights=[2, 1], epoch_size=48), stops=[2]).runs
    other = load(list(two), weights=[1, 2], epoch_size=48)
    with pytest.raises(ValueError, match="plan"):
        other.load_state_dict(run.state)


def test_weights_with_streaming_order(two):
    dl = load(list(two), weights=[1, 1], epoch_size=40, streaming=True)
    assert dl.stream_layout is not None
    got = keys(dl)
    assert Counter(k[0] for k in got) == {"a": 20, "b": 20}


def rss_peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def test_a_two_billion_sample_resampled_epoch_starts_at_once_in_small_memory(two):
    import time

    peak = rss_peak_mb()
    started = time.monotonic()
    dl = load(list(two), weights=[3, 1], epoch_size=2_000_000_000, resample=True)
    it = iter(dl)
    first = next(it)
    waited = time.monotonic() - started
    it.close()
    assert len(dl) == 250_000_000 and len(first[2]) == 8
    # behaviour bounds, loose: the whole order would be 16 GB and minutes (the old code)
    assert rss_peak_mb() - peak < 500 and waited < 60
    again = load(list(two), weights=[3, 1], epoch_size=2_000_000_000, resample=True)
    assert next(iter(again))[2] == first[2]  # the same (seed, epoch): the same draw
    fresh = load(list(two), weights=[3, 1], epoch_size=2_000_000_000, resample=True)
    ids = [g for _, g in zip(range(8), fresh.sampler)]  # torch's sampler view of epoch 0, lazily too
    assert all(type(g) is int for g in ids)
    assert [f"{os.path.basename(s)}/{k}" for s, k in map(fresh.dataset.describe, ids)] == first[2]

    # exact resume mid-epoch, far into it: the state says where, nothing is replayed
    state = dl.state_dict()
    state.update(samples_done=1_500_000_000, batches_done=187_500_000)
    resumed = load(list(two), weights=[3, 1], epoch_size=2_000_000_000, resample=True)
    resumed.load_state_dict(state)
    got = next(iter(resumed))[2]
    plan = dl.planner.plan(0, 1_500_000_000)  # the pure plan of the rest of the epoch
    assert [k.rsplit("/", 1)[-1] for k in got] == [
        resumed.dataset.describe(int(g))[1] for g in plan.order[0:8]]
    assert resumed.state_dict()["samples_done"] == 1_500_000_008


def test_a_resampled_epoch_resumes_exactly_and_honours_the_weights(two):
    result = check_resume(lambda: load(list(two), weights=[3, 1], epoch_size=4000, resample=True), stops=[7])
    whole = [k.rsplit("/", 1)[-1] for batch in result.steps for k in batch[2]]
    assert len(whole) == 4000
    share_b = sum(k[0] == "b" for k in whole) / len(whole)
    assert abs(share_b - 0.25) < 0.03  # in expectation: 1000 +- 27 (1 sigma)
