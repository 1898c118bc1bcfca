"""Streaming pieces of shards (issue 29, item 3) from a real S3-compatible server (moto, on
127.0.0.1), a node cache of 6 shards out of 12: every sample once, each piece fetched
once with ranged GETs into its own cache entry, the cache within its bound, more shards
per batch than whole shards give, exact resume (and a state saved before pieces existed
resumes in its whole-shard order), and a storage fault raises.

The piece floors (8 MiB, 64 samples) are lowered so that the test's small shards (128
samples, about 200 KB) are cut: ``engine.layout``'s constants, read when a loader is made."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from builders import FAST_RETRY, CacheWatch, keys_in_threads, keys_of, upload_shards

pytest.importorskip("moto")
pytest.importorskip("boto3")

import turbofeed  # noqa: E402
from turbofeed.engine import layout as layout_module  # noqa: E402
from turbofeed.io.stores.config import S3Config  # noqa: E402

BUCKET = "tf-pieces"
SHARDS, PER_SHARD, BATCH = 12, 128, 16
PREFIX = f"s3://{BUCKET}/train/"


@pytest.fixture(scope="module")
def data(server) -> dict:
    return upload_shards(server.endpoint, PREFIX, SHARDS, PER_SHARD)


@pytest.fixture
def cache6(server, data, point_aws_at, monkeypatch):
    """An :class:`S3Config` whose node cache holds 6 of the 12 shards; pieces of at least
    16 KiB and 16 samples."""
    from turbofeed.io.stores.urls import close_clients

    monkeypatch.setattr(layout_module, "PIECE_MIN_BYTES", 16 << 10)
    monkeypatch.setattr(layout_module, "PIECE_MIN_SAMPLES", 16)
    point_aws_at(server.endpoint)
    yield S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test",
                   cache_max_bytes=6 * data["shard_bytes"], retry=FAST_RETRY)
    close_clients()


def loader(config, cache_dir, **kw):
    return turbofeed.DataLoader(turbofeed.Dataset(PREFIX, storage=config, cache_dir=str(cache_dir)), batch_size=BATCH,
                                num_workers=2, shuffle=True, return_keys=True, on_error="raise",
                                transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]), **kw)


def shards_per_batch(keys: list[str]) -> float:
    return float(np.mean([len({k.split("-")[0] for k in keys[i:i + BATCH]})
                          for i in range(0, len(keys) - BATCH + 1, BATCH)]))


def test_an_epoch_of_pieces_reads_every_sample_once_and_each_piece_once(cache6, data, tmp_path, monkeypatch):
    dl = loader(cache6, tmp_path / "a")
    lay = dl.stream_layout
    assert lay is not None and lay.pieces is not None and not lay.pieces.whole.any()
    assert dl.state_dict()["piece_bytes"] == lay.piece_bytes > 0
    pieces = len(lay.pieces)
    assert pieces >= 3 * SHARDS
    before = dl.dataset.storage_stats()
    watch = CacheWatch(str(tmp_path / "a" / "s3"))
    try:
        got = keys_of(dl)
    finally:
        peak = watch.stop()
    after = dl.dataset.storage_stats()
    assert Counter(got) == Counter(data["keys"])  # every sample exactly once
    assert after["pieces_downloaded"] - before["pieces_downloaded"] == pieces  # each piece once
    assert after["cache_misses"] == before["cache_misses"]  # no sample read with its own GET
    fetched = after["bytes_read"] - before["bytes_read"]
    assert fetched <= 1.02 * data["bytes"], (fetched, data["bytes"])
    # sampled by a thread: an eviction and the next reservation between its scans of objects/
    # and tmp/ can count one piece twice
    assert peak <= cache6.cache_max_bytes + int(lay.pieces.nbytes.max()), (peak, cache6.cache_max_bytes)
    dl.close()
    # the same loader with whole shards (pieces no smaller than the shards): fewer shards per batch
    monkeypatch.setattr(layout_module, "PIECE_MIN_BYTES", 1 << 40)
    whole = loader(cache6, tmp_path / "b")
    assert whole.stream_layout.pieces is None and whole.state_dict()["piece_bytes"] == 0
    old = keys_of(whole)
    assert Counter(old) == Counter(data["keys"])
    assert shards_per_batch(got) >= 1.3 * shards_per_batch(old) and shards_per_batch(got) >= 6, (
        shards_per_batch(got), shards_per_batch(old))
    whole.close()


def test_resume_mid_epoch_is_exact_and_an_old_state_keeps_whole_shards(cache6, data, tmp_path, monkeypatch):
    everything = keys_of(loader(cache6, tmp_path / "a"))
    dl = loader(cache6, tmp_path / "b")
    it = iter(dl)
    head = keys_of([next(it) for _ in range(30)])
    state = dl.state_dict()
    dl.close()
    again = loader(cache6, tmp_path / "c")
    again.load_state_dict(state)
    assert head + keys_of(again) == everything
    # a state saved before pieces existed (no "piece_bytes"): the whole-shard order it was saved in
    monkeypatch.setattr(layout_module, "PIECE_MIN_BYTES", 1 << 40)
    old_all = keys_of(loader(cache6, tmp_path / "d"))
    old_run = loader(cache6, tmp_path / "d2")
    it = iter(old_run)
    old_head = keys_of([next(it) for _ in range(30)])
    old_state = {k: v for k, v in old_run.state_dict().items() if k != "piece_bytes"}
    old_run.close()
    monkeypatch.setattr(layout_module, "PIECE_MIN_BYTES", 16 << 10)
    resumed = loader(cache6, tmp_path / "e")  # would cut pieces on its own
    assert resumed.stream_layout.pieces is not None
    resumed.load_state_dict(old_state)
    assert old_head + keys_of(resumed) == old_all
    assert resumed.state_dict()["piece_bytes"] == 0


def test_an_object_replaced_mid_epoch_raises_a_storage_error(cache6, data, tmp_path):
    from turbofeed.io.stores.client import S3Client

    import os

    dl = loader(cache6, tmp_path)
    for entry in os.scandir(tmp_path / "s3" / "objects"):  # the whole copies indexing left: gone, as
        os.remove(entry.path)                                # eviction makes them in a larger dataset
    victim = f"{PREFIX}shard-0005.tar"
    client = S3Client(cache6)
    body = bytes(client.get_range(victim, 0, client.head(victim).size))
    client.put(victim, body[:600] + bytes([body[600] ^ 1]) + body[601:])  # a byte changed: another ETag
    try:
        with pytest.raises(turbofeed.StorageError) as info:
            keys_of(dl)
        assert info.value.shard == victim
    finally:
        client.put(victim, body)
        client.close()
        dl.close()


def test_the_ranks_of_a_node_share_its_pieces(cache6, data, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # one node, two ranks, one cache
    dls = [loader(cache6, tmp_path, rank=r, world_size=2) for r in range(2)]
    pieces = len(dls[0].stream_layout.pieces)
    base = dls[0].dataset.storage_stats()["pieces_downloaded"]  # one client, shared by both
    out = keys_in_threads(dls)
    assert Counter(out[0] + out[1]) == Counter(data["keys"])
    downloaded = dls[0].dataset.storage_stats()["pieces_downloaded"] - base
    # each piece once for the node (a piece that found no room while the other rank held the
    # cache, the ranks running freely here, is read with ranged GETs instead: fewer)
    assert pieces - 4 <= downloaded <= pieces + 2, (downloaded, pieces, dls[0].dataset.storage_stats())
    for dl in dls:
        dl.close()


def test_an_elastic_resume_of_pieces_reads_the_rest_once(cache6, data, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # two nodes of one rank
    ranks = [loader(cache6, tmp_path / f"n{r}", rank=r, world_size=2) for r in range(2)]
    assert ranks[0].stream_layout.pieces is not None
    its = [iter(dl) for dl in ranks]
    done = [k for it in its for k in keys_of([next(it) for _ in range(10)])]
    state = ranks[0].state_dict()
    for dl in ranks:
        dl.close()
    alone = loader(cache6, tmp_path / "n0")  # one node now: it reads both canonical streams
    alone.load_state_dict(state)
    assert Counter(done + keys_of(alone)) == Counter(data["keys"])


@pytest.mark.parametrize("draw", [dict(resample=True, epoch_size=3 * SHARDS * PER_SHARD),
                                  dict(weights=[1.0], epoch_size=3 * SHARDS * PER_SHARD)])
def test_resampled_and_weighted_epochs_of_pieces_stay_within_the_cache(cache6, data, tmp_path, draw):
    """Each piece is held for the block that reads it, however often its shard is drawn: no
    sample read with its own GET, the cache within its bound."""
    mixed = turbofeed.mix([turbofeed.Dataset(PREFIX, storage=cache6, cache_dir=str(tmp_path), streaming=True)],
                          **draw)
    dl = turbofeed.DataLoader(mixed, batch_size=BATCH, num_workers=2, shuffle=True, return_keys=True,
                              on_error="raise", transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]))
    assert dl.stream_layout.pieces is not None
    before = dl.dataset.storage_stats()["cache_misses"]
    watch = CacheWatch(str(tmp_path / "s3"))
    try:
        got = keys_of(dl)
    finally:
        peak = watch.stop()
    assert len(got) == 3 * SHARDS * PER_SHARD and set(got) <= set(data["keys"])
    if "weights" in draw:
        assert Counter(got) == Counter(data["keys"] * 3)  # exactly 3 passes
    assert dl.dataset.storage_stats()["cache_misses"] == before
    assert peak <= cache6.cache_max_bytes + int(dl.stream_layout.pieces.nbytes.max()), (peak, cache6.cache_max_bytes)
    dl.close()


# A training process of one epoch of pieces: after each batch it saves, in one atomic
# replace, the loader's state_dict with the keys delivered so far (a checkpoint), then
# sleeps a little so that the test can kill it mid-epoch. argv: the test dirs, the
# endpoint, the cache's bound and dir, the checkpoint's path, and "resume" to start from it.
_TRAINER = r"""
import os, pickle, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from builders import FAST_RETRY, keys_of
import turbofeed
from turbofeed.engine import layout
from turbofeed.io.stores.config import S3Config
layout.PIECE_MIN_BYTES, layout.PIECE_MIN_SAMPLES = 16 << 10, 16  # as the fixture cache6
endpoint, bound, cache_dir, ckpt, mode = sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
config = S3Config(endpoint_url=endpoint, access_key_id="test", secret_access_key="test",
                  cache_max_bytes=bound, retry=FAST_RETRY)
dl = turbofeed.DataLoader(turbofeed.Dataset(sys.argv[8], storage=config, cache_dir=cache_dir), batch_size=16,
                          num_workers=2, shuffle=True, return_keys=True, on_error="raise",
                          transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(16)]))
assert dl.stream_layout.pieces is not None and not dl.stream_layout.pieces.whole.any()
done = []
if mode == "resume":
    with open(ckpt, "rb") as f:
        saved = pickle.load(f)
    dl.load_state_dict(saved["state"])
    done = saved["keys"]
for batch in dl:
    done = done + keys_of([batch])
    state = dl.state_dict()
    assert state["piece_bytes"] > 0
    with open(ckpt + ".tmp", "wb") as f:
        pickle.dump({"state": state, "keys": done, "steps": len(done) // 16}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.03 if mode == "first" else 0)
print("EPOCH DONE", flush=True)
"""


def test_a_process_killed_mid_epoch_resumes_from_its_checkpoint_and_delivers_each_sample_once(
        cache6, data, tmp_path, server):
    """A real child process streams an epoch of pieces, checkpointing after every batch; it
    is killed with SIGKILL mid-epoch (no handler, no cleanup: its node cache keeps whatever
    pieces, temporary files and locks it held); a new process on the same node cache loads the
    last checkpoint and finishes the epoch. The checkpointed keys and the new process's give
    every sample exactly once."""
    import os
    import pickle
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    tests_dir = str(Path(__file__).resolve().parents[2])
    src = str(Path(turbofeed.__file__).resolve().parents[1])
    ckpt, cache_dir = str(tmp_path / "ckpt.pkl"), str(tmp_path / "node-cache")

    def start(mode: str) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
        return subprocess.Popen([sys.executable, "-c", _TRAINER, tests_dir, src, server.endpoint,
                                 str(cache6.cache_max_bytes), cache_dir, ckpt, mode, PREFIX],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

    total_steps = SHARDS * PER_SHARD // BATCH
    first = start("first")
    try:
        deadline = time.monotonic() + 120
        steps = 0
        while steps < total_steps // 3:  # a third of the epoch checkpointed
            assert first.poll() is None, first.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the first process made no progress"
            time.sleep(0.02)
            if os.path.exists(ckpt):
                with open(ckpt, "rb") as f:
                    steps = pickle.load(f)["steps"]
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
    assert first.returncode == -signal.SIGKILL
    with open(ckpt, "rb") as f:
        saved = pickle.load(f)
    assert total_steps // 3 <= saved["steps"] < total_steps  # killed mid-epoch
    before = list(saved["keys"])
    second = start("resume")
    try:
        out, _ = second.communicate(timeout=180)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(30)
    assert second.returncode == 0 and "EPOCH DONE" in out, out[-3000:]
    with open(ckpt, "rb") as f:
        final = pickle.load(f)["keys"]
    assert final[:len(before)] == before
    assert Counter(final) == Counter(data["keys"])  # every sample exactly once over both processes
    assert len(final) - len(before) > 0
