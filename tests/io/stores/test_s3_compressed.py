"""io.stores.compressed: .tar.gz / .tgz / .tar.bz2 / .tar.xz objects on a real S3-compatible server
(moto, on 127.0.0.1) are downloaded once, decompressed into a plain copy in the node cache
and read from it, giving the samples of their plain equivalents; a plain copy over the
cache's bound raises StorageError, copies not in use take turns in the cache, .tar.zst is
reported."""

from __future__ import annotations

import bz2
import gc
import gzip
import json
import lzma
import os
import subprocess
import sys
import threading
from collections import Counter

import pytest
from builders import small_jpeg, write_tar

pytest.importorskip("moto")
pytest.importorskip("boto3")

import turbofeed  # noqa: E402
from turbofeed.errors import DatasetError  # noqa: E402
from turbofeed.io import IndexedDataset  # noqa: E402
from turbofeed.io.retry import RetryPolicy  # noqa: E402
from turbofeed.io.stores.cache import ShardCache  # noqa: E402
from turbofeed.io.stores.client import S3Client  # noqa: E402
from turbofeed.io.stores.config import S3Config, configure  # noqa: E402
from turbofeed.io.stores.urls import close_clients  # noqa: E402
from turbofeed.testing import LocalS3Server  # noqa: E402

BUCKET = "tf-packed"
PER_SHARD = 20
FAST_RETRY = RetryPolicy(max_attempts=12, base_delay=0.005, max_delay=0.05)
PREFIX = f"s3://{BUCKET}/mix/"


def _members(s: int) -> list[tuple[str, bytes]]:
    out = []
    for i in range(PER_SHARD):
        key = f"s{s}-{i:04d}"
        out += [(f"{key}.jpg", small_jpeg(100 * s + i)), (f"{key}.cls", str((7 * s + i) % 5).encode())]
    return out


@pytest.fixture(scope="module")
def server():
    with LocalS3Server() as srv:
        yield srv


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> list[str]:
    """The local plain equivalents of the uploaded shards, in the prefix's order."""
    out = tmp_path_factory.mktemp("plain")
    return [write_tar(str(out / f"shard-{s}.tar"), _members(s)) for s in range(5)]


@pytest.fixture(scope="module")
def objects(server, plain) -> dict[str, bytes]:
    """Under s3://tf-packed/mix/: a plain .tar, a .tar.gz and a .tgz (the epoch's shards);
    under others/: the same shards as .tar.bz2 and .tar.xz, and a .tar.zst."""
    bodies = [open(p, "rb").read() for p in plain]
    out = {f"{PREFIX}a-plain.tar": bodies[0],
           f"{PREFIX}b-packed.tar.gz": gzip.compress(bodies[1], mtime=0),
           f"{PREFIX}c-packed.tgz": gzip.compress(bodies[2], mtime=0),
           f"s3://{BUCKET}/others/d.tar.bz2": bz2.compress(bodies[3]),
           f"s3://{BUCKET}/others/e.tar.xz": lzma.compress(bodies[4]),
           f"s3://{BUCKET}/others/f.tar.zst": b"\x28\xb5\x2f\xfd" + bodies[0]}
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test",
                               secret_access_key="test"))
    client.boto3_client().create_bucket(Bucket=BUCKET)
    for url, body in out.items():
        client.put(url, body)
    client.close()
    return out


@pytest.fixture(autouse=True)
def aws_env(server, point_aws_at):
    point_aws_at(server.endpoint)  # and a fresh node cache per test
    configure(S3Config(retry=FAST_RETRY))
    yield
    gc.collect()
    close_clients()
    configure(S3Config())


def _epoch(data) -> list[tuple]:
    loader = turbofeed.DataLoader(data, batch_size=8, num_workers=2, shuffle=True, seed=5,
                                  return_keys=True, on_error="raise",
                                  transform=turbofeed.transforms.imagenet_train(24))
    return [(images.clone(), labels.clone(), keys) for images, labels, keys in loader]


def _plain_copies() -> list[str]:
    folder = os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3", "objects")
    return sorted(n for n in os.listdir(folder) if n.endswith(".plain.tar"))


def test_epoch_over_gz_and_tgz_matches_the_plain_shards_each_fetched_once(objects, plain):
    got = _epoch(PREFIX)
    want = _epoch(plain[:3])
    assert len(got) == len(want) == 8  # 60 samples, batches of 8
    for (xa, ya, ka), (xb, yb, kb) in zip(got, want):
        assert [k.split("/")[1] for k in ka] == [k.split("/")[1] for k in kb]  # "<shard>/<key>"
        assert (ya == yb).all() and (xa == xb).all()
    stats = IndexedDataset(PREFIX).storage_stats()  # the shared client's totals, this one adding no GET
    mix = [len(body) for url, body in objects.items() if url.startswith(PREFIX)]
    assert stats["bytes_read"] == sum(mix)  # every object once, whole; no ranged sample GET
    assert stats["cache_misses"] == 0 and stats["cache_hits"] >= 3 * PER_SHARD
    assert len(_plain_copies()) == 2


def test_a_second_dataset_reuses_the_plain_copy_and_index(objects, plain):
    first = IndexedDataset(PREFIX)
    before = first.storage_stats()
    second = IndexedDataset(PREFIX)  # while the first still pins its plain copies
    after = second.storage_stats()
    assert after["requests"] - before["requests"] == 1  # the LIST: no HEAD, no GET
    assert after["bytes_read"] == before["bytes_read"]
    local = IndexedDataset(plain[:3])
    assert [second.read(g) for g in range(len(second))] == [local.read(g) for g in range(len(local))]
    assert (second.labels == local.labels).all() and second.damaged == []
    first.close()
    second.close()
    assert len(_plain_copies()) == 2
    assert len(os.listdir(os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3-index"))) == 3


def test_bz2_and_xz_are_read_and_zstd_is_reported(objects, plain, caplog):
    ds = IndexedDataset(f"s3://{BUCKET}/others/")
    assert ds.damaged == [f"s3://{BUCKET}/others/f.tar.zst"]
    assert "zstd-compressed tar, not read" in caplog.text
    local = IndexedDataset(plain[3:5])
    assert [ds.read(g) for g in range(len(ds))] == [local.read(g) for g in range(len(local))]
    with pytest.raises(DatasetError, match="f.tar.zst: zstd-compressed"):
        IndexedDataset(f"s3://{BUCKET}/others/f.tar.zst", on_damage="raise")


def _cache_files() -> list[tuple[str, int]]:
    """(name, size) of every file under the node cache's objects/ and tmp/: what its bound
    counts (a .part's size is its reservation, at least what it holds)."""
    root = os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3")
    return [(e.name, e.stat().st_size) for sub in ("objects", "tmp")
            for e in os.scandir(os.path.join(root, sub)) if not e.name.endswith(".lock")]


def test_a_plain_copy_over_the_bound_raises_whatever_on_damage_says(objects, plain):
    url = f"{PREFIX}b-packed.tar.gz"
    plain_size = os.path.getsize(plain[1])
    for bound in (plain_size - 1, 1):  # the compressed object fits in the cache; it does not
        configure(S3Config(retry=FAST_RETRY, cache_max_bytes=bound))
        for on_damage in ("skip", "raise"):
            with pytest.raises(turbofeed.StorageError, match=rf"b-packed.tar.gz: its decompressed copy is "
                               rf"over {bound} bytes \(from {len(objects[url])} compressed bytes\), the node "
                               "cache's bound: raise the bound with TURBOFEED_S3_CACHE_SIZE=SIZE"):
                IndexedDataset([f"{PREFIX}a-plain.tar", url], on_damage=on_damage)  # never dropped
        assert _plain_copies() == []
        assert sum(size for _, size in _cache_files()) <= bound
    scratch = os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3-indexing")
    assert os.listdir(scratch) == []  # the temporary compressed copies are gone


def test_copies_take_turns_in_a_cache_for_one_and_one_in_use_elsewhere_is_never_evicted(objects, plain):
    gz, tgz = f"{PREFIX}b-packed.tar.gz", f"{PREFIX}c-packed.tgz"
    sizes = [os.path.getsize(p) for p in plain[1:3]]
    bound = max(sizes) + min(sizes) // 2  # room for one plain copy, not two
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=bound))
    first, second = IndexedDataset(gz), IndexedDataset(tgz)  # the second's copy evicts the first's (not being read)
    want = [IndexedDataset(p) for p in plain[1:3]]
    for i in (3, 7, 0, 19):  # alternately: each read makes its copy again, evicting the other
        assert first.read(i) == want[0].read(i) and second.read(i) == want[1].read(i)
        assert len(_plain_copies()) == 1 and sum(size for _, size in _cache_files()) <= bound
    assert first.sources[0].plain.made >= 4 and second.sources[0].plain.made >= 4
    first.close()
    second.close()
    # a copy pinned by another reader (here: a descriptor from the cache, as another
    # process holds one) is never evicted: the other shard's copy has no room
    cache = ShardCache(os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3"), bound)
    (held,) = _plain_copies()
    fd = cache.open(held)
    try:
        other = second if held == first.sources[0].plain.name else first
        with pytest.raises(turbofeed.StorageError, match="no room for its decompressed copy .* held by copies "
                           "in use by this or other processes"):
            other.read(1)
        assert _plain_copies() == [held]
    finally:
        os.close(fd)


MANY = f"s3://{BUCKET}/many/"


@pytest.fixture(scope="module")
def many(server, tmp_path_factory) -> dict:
    """Under s3://tf-packed/many/: 8 .tar.gz shards of 20 samples; their keys and the
    size of the largest plain tar."""
    out = tmp_path_factory.mktemp("many")
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test"))
    keys, largest = [], 0
    for s in range(8):
        members = _members(10 + s)
        keys += [name.split(".")[0] for name, _ in members if name.endswith(".jpg")]
        body = open(write_tar(str(out / f"{s}.tar"), members), "rb").read()
        largest = max(largest, len(body))
        client.put(f"{MANY}shard-{s}.tar.gz", gzip.compress(body, mtime=0))
    client.close()
    return {"keys": keys, "largest": largest}


def test_compressed_shards_larger_together_than_the_cache_stream_every_sample_once(objects, many):
    bound = 3 * many["largest"]  # the plain copies of 8 shards in room for 3
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=bound))
    loader = turbofeed.DataLoader(turbofeed.Dataset(MANY, streaming=True), batch_size=8, num_workers=2, shuffle=True,
                                  seed=3,
                                  return_keys=True, on_error="raise",
                                  transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(8)]))
    assert loader.dataset.damaged == [] and len(loader.dataset) == 8 * PER_SHARD  # none dropped
    assert loader.stream_layout is not None
    made = [s.plain.made for s in loader.dataset.sources]
    for epoch in range(2):
        loader.set_epoch(epoch)
        keys = [k.rsplit("/", 1)[-1] for _, _, batch in loader for k in batch]
        assert Counter(keys) == Counter(many["keys"])  # every sample exactly once
        assert sum(size for _, size in _cache_files()) <= bound
        now = [s.plain.made for s in loader.dataset.sources]
        assert all(b - a <= 2 for a, b in zip(made, now))  # each decompressed about once an epoch
        made = now
    # each copy was let go after its block: other processes of the node may evict them all
    cache = ShardCache(os.path.join(os.environ["TURBOFEED_CACHE_DIR"], "s3"), bound)
    assert _plain_copies() and cache.make_room(bound) and _plain_copies() == []


RANK = r"""
import json, sys
import turbofeed
rank, out = int(sys.argv[1]), sys.argv[2]
loader = turbofeed.DataLoader(turbofeed.Dataset(sys.argv[3], streaming=True), batch_size=4, num_workers=2,
                              shuffle=True, seed=9, rank=rank, world_size=2, return_keys=True, on_error="raise",
                              transform=turbofeed.transforms.Compose([turbofeed.transforms.Resize(8)]))
keys = [k.rsplit("/", 1)[-1] for _, _, batch in loader for k in batch]
json.dump({"keys": keys, "made": sum(s.plain.made for s in loader.dataset.sources)}, open(out, "w"))
"""


def test_two_ranks_of_a_node_stream_compressed_shards_through_one_cache(objects, many, tmp_path):
    """Two processes (the ranks of one node, no collective keeping them in step) stream the
    same compressed shards through one node cache for 3 copies: every sample once across
    them, the cache within its bound, neither stopped by the other's pins."""
    bound = 3 * many["largest"]
    env = {**os.environ, "TURBOFEED_S3_CACHE_SIZE": str(bound), "PYTHONPATH": os.pathsep.join(sys.path)}
    peak = [0]
    done = threading.Event()

    def watch() -> None:  # the bytes the cache holds, sampled
        # A scan lists objects/ and then tmp/, so an eviction followed by the next
        # reservation between the two counts one copy twice in that scan alone. A real
        # excess lasts (the copy is held while its samples are read), so a peak counts
        # only what two scans in a row both saw.
        last = 0
        while not done.wait(0.005):
            try:
                now = sum(size for _, size in _cache_files())
            except FileNotFoundError:  # the cache not made yet, or a file evicted while listed
                continue
            peak[0] = max(peak[0], min(last, now))
            last = now
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(tmp_path / f"rank{r}.json"), MANY], env=env)
             for r in range(2)]
    try:
        for p in procs:
            assert p.wait(240) == 0
    finally:
        done.set()
        for p in procs:
            p.kill()
        watcher.join(5)
    got = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert Counter(got[0]["keys"] + got[1]["keys"]) == Counter(many["keys"])  # every sample once
    assert 0 < peak[0] <= bound
