"""Streaming mode over s3:// shards on a real S3-compatible server (moto, on 127.0.0.1) with a
node cache that holds 30% of the data: every sample once per epoch, every shard
downloaded once, the cache within its bound, exact and elastic resume."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from builders import FAST_RETRY, CacheWatch, keys_in_threads, keys_of, upload_shards

pytest.importorskip("moto")
pytest.importorskip("boto3")

import turbofeed  # noqa: E402
from turbofeed.io.stores.client import S3Client  # noqa: E402
from turbofeed.io.stores.config import S3Config  # noqa: E402

BUCKET = "tf-stream"
SHARDS, PER_SHARD = 16, 10
PREFIX = f"s3://{BUCKET}/train/"


@pytest.fixture(scope="module")
def data(server) -> dict:
    """16 shards of 10 samples uploaded under ``PREFIX``; their bytes and keys."""
    return upload_shards(server.endpoint, PREFIX, SHARDS, PER_SHARD)


def loader(config, cache_dir, streaming=None, **kw):
    kw.setdefault("shuffle", True)
    data = turbofeed.Dataset(PREFIX, storage=config, cache_dir=str(cache_dir), streaming=streaming)
    return turbofeed.DataLoader(data, batch_size=8,
                                num_workers=2,
                                transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]),
                                return_keys=True, **kw)


def test_an_epoch_streams_every_sample_once_and_each_shard_once(config, data, tmp_path):
    dl = loader(config, tmp_path)
    assert dl.stream_layout is not None  # on by default: the data is larger than the cache
    assert dl.stream_layout.block_bytes == config.cache_max_bytes // 2
    before = dl.dataset.storage_stats()
    objects = tmp_path / "s3" / "objects"  # shards indexed at construction may still be cached
    cached = sum(1 for e in os.scandir(objects) if not e.name.endswith((".lock", ".part"))) if objects.is_dir() else 0
    watch = CacheWatch(str(tmp_path / "s3"))
    try:
        it = iter(dl)
        assert [s.name for s in it.engine.stages][0] == "fetch.stream"
        got = keys_of(it)
    finally:
        peak = watch.stop()
    after = dl.dataset.storage_stats()
    assert Counter(got) == Counter(data["keys"])  # every sample exactly once
    # each shard at most once, and every one not in the cache already (how many stayed
    # there from construction depends on which indexing thread ended last)
    assert SHARDS - cached <= after["shards_downloaded"] - before["shards_downloaded"] <= SHARDS
    assert after["cache_misses"] == before["cache_misses"]  # no sample read with a ranged GET
    fetched = after["bytes_read"] - before["bytes_read"]
    assert fetched <= 1.15 * data["bytes"], (fetched, data["bytes"])
    assert peak <= config.cache_max_bytes + 2 * data["shard_bytes"], (peak, config.cache_max_bytes)
    dl.close()


def test_blocks_shuffle_within_the_cache_and_epochs_differ(config, data, tmp_path):
    dl = loader(config, tmp_path, drop_last=False)
    first, second = keys_of(dl), keys_of(dl)
    assert first != second and sorted(first) == sorted(second)
    # two-level: the first 30% of the epoch comes from few shards, not from all of them
    early = {k.split("-")[0] for k in first[:len(first) // 4]}
    assert len(early) <= 5, early
    dl.close()


def test_small_data_is_not_streamed_unless_asked(config, data, tmp_path):
    roomy = S3Config(endpoint_url=config.endpoint_url, access_key_id="test", secret_access_key="test",
                     cache_max_bytes=4 * data["bytes"], retry=FAST_RETRY)
    assert loader(roomy, tmp_path / "a").stream_layout is None
    asked = loader(roomy, tmp_path / "b", streaming=True)
    assert asked.stream_layout is not None
    assert Counter(keys_of(asked)) == Counter(data["keys"])
    assert loader(config, tmp_path / "c", streaming=False).stream_layout is None


@pytest.mark.parametrize("shards_held", [0.5, 1.5])
def test_streaming_with_a_cache_smaller_than_two_shards_is_refused_at_construction(
        config, data, tmp_path, caplog, shards_held):
    """It used to wait 5 s for room before each shard (minutes per epoch): now asked-for
    streaming is refused at once, naming the bound needed, and by default the data is
    read sample by sample with one warning that names it too."""
    largest = max(S3Client(config).list(PREFIX), key=lambda o: o.size)
    small = S3Config(endpoint_url=config.endpoint_url, access_key_id="test", secret_access_key="test",
                     cache_max_bytes=int(shards_held * largest.size), retry=FAST_RETRY)
    with pytest.raises(turbofeed.StorageError) as info:
        loader(small, tmp_path / "a", streaming=True)
    assert info.value.shard == largest.url
    assert (f"streaming=True needs a node cache of at least twice the largest shard (2 x {largest.size} = "
            f"{2 * largest.size} bytes" in info.value.reason)
    assert f"its bound is {small.cache_max_bytes} bytes" in info.value.reason
    assert f"S3Config(cache_max_bytes={2 * largest.size})" in info.value.reason
    caplog.set_level("WARNING", logger="turbofeed")
    unstreamed = loader(small, tmp_path / "b")  # streaming=None: not streamed
    assert unstreamed.stream_layout is None
    assert f"raise S3Config.cache_max_bytes to at least {2 * largest.size} bytes" in caplog.text
    assert Counter(keys_of(unstreamed)) == Counter(data["keys"])
    enough = S3Config(endpoint_url=config.endpoint_url, access_key_id="test", secret_access_key="test",
                      cache_max_bytes=2 * largest.size, retry=FAST_RETRY)
    streamed = loader(enough, tmp_path / "c", streaming=True)  # the bound the message names is enough
    assert streamed.stream_layout is not None
    assert Counter(keys_of(streamed)) == Counter(data["keys"])
    assert streamed.dataset.storage_stats()["cache_misses"] == 0  # no sample waited its way to a GET


def test_resume_mid_epoch_continues_exactly(config, data, tmp_path):
    whole = keys_of(loader(config, tmp_path / "a"))
    dl = loader(config, tmp_path / "b")
    it = iter(dl)
    head = keys_of([next(it) for _ in range(7)])
    state = dl.state_dict()
    assert state["canonical_nodes"] == 1 and state["block_bytes"] == config.cache_max_bytes // 2
    dl.close()
    again = loader(config, tmp_path / "c")
    again.load_state_dict(state)
    rest = keys_of(again)
    assert head + rest == whole


def test_elastic_resume_on_another_world_size(config, data, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # two nodes of one rank
    ranks = [loader(config, tmp_path / f"n{r}", rank=r, world_size=2) for r in range(2)]
    assert ranks[0].stream_layout.canonical_nodes == 2
    its = [iter(dl) for dl in ranks]
    done = [k for it in its for k in keys_of([next(it) for _ in range(3)])]
    state = ranks[0].state_dict()
    for dl in ranks:
        dl.close()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    alone = loader(config, tmp_path / "n0")  # one node now: it reads both canonical streams
    alone.load_state_dict(state)
    rest = keys_of(alone)
    assert Counter(done + rest) == Counter(data["keys"])


def test_two_nodes_read_disjoint_shards(config, data, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    shards = []
    for r in range(2):
        dl = loader(config, tmp_path / f"node{r}", rank=r, world_size=2)
        shards.append({k.split("-")[0] for k in keys_of(dl)})
        dl.close()
    assert not shards[0] & shards[1]
    assert len(shards[0] | shards[1]) == SHARDS


def test_ranks_of_a_node_share_its_downloads(config, data, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # one node, two ranks, one cache
    dls = [loader(config, tmp_path, rank=r, world_size=2) for r in range(2)]
    for dl in dls:
        dl.dataset.storage_stats()
    base = sum(dl.dataset.storage_stats()["shards_downloaded"] for dl in dls)
    out = keys_in_threads(dls)
    assert Counter(out[0] + out[1]) == Counter(data["keys"])
    # the client (and its counters) is shared by the two loaders of this process
    downloaded = dls[0].dataset.storage_stats()["shards_downloaded"] - base // 2
    assert downloaded <= SHARDS + 2, downloaded


KILLED_RUN = r"""
import json, os, signal, sys
import turbofeed
from turbofeed import transforms as T
log, kill_at, cache, state = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = turbofeed.Dataset(PREFIX, cache_dir=os.environ["TURBOFEED_CACHE_DIR"],
                         storage=turbofeed.S3Config(cache_max_bytes=cache))
dl = turbofeed.DataLoader(data, batch_size=8, num_workers=2, shuffle=True, return_keys=True,
                          transform=T.Compose([T.Resize(16)]))
if state != "-":
    dl.load_state_dict(json.load(open(state)))
with open(log, "a") as f:
    for step, (_, _, keys) in enumerate(dl):
        f.write(json.dumps({"keys": [k.rsplit("/", 1)[-1] for k in keys], "state": dl.state_dict()}) + "\n")
        f.flush()
        os.fsync(f.fileno())
        if step + 1 == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no atexit: as a node that dies
""".replace("PREFIX", repr(PREFIX))


def test_killed_and_resumed_run_equals_an_uninterrupted_one(config, data, tmp_path):
    import json
    import signal
    import subprocess
    import sys

    env = {**os.environ, "TURBOFEED_CACHE_DIR": str(tmp_path / "cache")}

    def run(log, kill_at: int, state: str = "-") -> int:
        done = subprocess.run([sys.executable, "-c", KILLED_RUN, str(log), str(kill_at),
                               str(config.cache_max_bytes), state], env=env, capture_output=True, text=True,
                              timeout=180)
        return done.returncode

    whole = keys_of(loader(config, tmp_path / "whole"))
    log = tmp_path / "run.jsonl"
    assert run(log, 9) == -signal.SIGKILL
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 9
    (tmp_path / "state.json").write_text(json.dumps(lines[-1]["state"]))
    assert run(log, 0, str(tmp_path / "state.json")) == 0  # the same node cache, left as the kill left it
    got = [k for line in json.loads("[" + ",".join(log.read_text().splitlines()) + "]") for k in line["keys"]]
    assert got == whole
