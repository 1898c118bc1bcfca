"""io.stores.shards with a node cache smaller than the data, through a real S3 server (moto on
127.0.0.1): every sample arrives exactly once with its own label, the cache never holds
more than its bound, eviction never pulls a shard from under a reader, persisted
indexes are right; empty and .tar.zst objects under a prefix are reported."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import threading
import time
from collections import Counter

import numpy as np
import pytest
from builders import tar_bytes

pytest.importorskip("moto")
pytest.importorskip("boto3")
from PIL import Image  # noqa: E402

import turbofeed  # noqa: E402
from turbofeed.errors import DatasetError  # noqa: E402
from turbofeed.io import IndexedDataset  # noqa: E402
from turbofeed.io.retry import RetryPolicy  # noqa: E402
from turbofeed.io.stores.client import S3Client  # noqa: E402
from turbofeed.io.stores.config import S3Config, configure  # noqa: E402
from turbofeed.io.stores.urls import close_clients  # noqa: E402
from turbofeed.testing import FaultProxy, LocalS3Server  # noqa: E402

BUCKET = "tf-trust"
SHARDS, PER_SHARD = 16, 12
FAST_RETRY = RetryPolicy(max_attempts=12, base_delay=0.005, max_delay=0.05)


def label_of(key: str) -> int:
    """Each sample's label follows from its key, so a label read from another shard's
    bytes (or another sample's) is caught."""
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % 1000


def _jpeg(seed: int) -> bytes:
    """A 16 x 16 JPEG whose byte length varies with ``seed``: the shards' member offsets
    differ, so reading one shard at another's offsets cannot land on its labels."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    pixels[:, : seed % 16] = 128  # flat columns: a different compressed size per sample
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=80 + seed % 15)
    return buf.getvalue()


def _shard(s: int) -> bytes:
    members = []
    for i in range(PER_SHARD):
        key = f"s{s:02d}-{i:04d}"
        members += [(f"{key}.jpg", _jpeg(s * PER_SHARD + i)), (f"{key}.cls", str(label_of(key)).encode())]
    return tar_bytes(members)


@pytest.fixture(scope="module")
def server():
    with LocalS3Server() as srv:
        yield srv


@pytest.fixture(scope="module")
def bodies(server) -> dict[str, bytes]:
    """16 shards of 12 samples under s3://tf-trust/many/ (about 11 KB each)."""
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test",
                               secret_access_key="test"))
    client.boto3_client().create_bucket(Bucket=BUCKET)
    out = {}
    for s in range(SHARDS):
        url = f"s3://{BUCKET}/many/shard-{s:06d}.tar"
        out[url] = _shard(s)
        client.put(url, out[url])
    client.close()
    return out


@pytest.fixture(autouse=True)
def aws_env(server, point_aws_at):
    point_aws_at(server.endpoint)
    yield
    close_clients()
    configure(S3Config())


def _shard_bytes(bodies) -> int:
    return min(len(b) for b in bodies.values())


def _check_epoch(spec, expect_keys: set[str], **kw) -> turbofeed.DataLoader:
    """One epoch with 4 worker threads: every key exactly once, each with its own label."""
    loader = turbofeed.DataLoader(spec, batch_size=8, num_workers=4, shuffle=True, seed=5,
                                  return_keys=True, on_error="raise", **kw)
    seen: Counter = Counter()
    for _, labels, keys in loader:
        for key, label in zip(keys, labels.tolist()):
            key = key.rsplit("/", 1)[-1]  # the loader's keys are "<shard name>/<key>"
            assert label == label_of(key), f"{key}: label {label}, expected {label_of(key)}"
            seen[key] += 1
    assert set(seen) == expect_keys, f"{len(expect_keys - set(seen))} samples missing"
    assert set(seen.values()) == {1}
    assert loader.stats.as_dict()["errors"] == {}
    return loader


def _all_keys() -> set[str]:
    return {f"s{s:02d}-{i:04d}" for s in range(SHARDS) for i in range(PER_SHARD)}


def test_shards_larger_than_the_cache_are_indexed_right_and_the_index_persists_right(bodies, tmp_path):
    """Cache bound below one shard: every shard is indexed from a temporary copy, 8 at a
    time; none is kept, every label is right, and a second loader (indexes from the
    index cache) delivers the same."""
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=_shard_bytes(bodies) // 2))
    _check_epoch(f"s3://{BUCKET}/many/", _all_keys())
    cache = tmp_path / "cache" / "s3"
    assert [n for n in os.listdir(cache / "objects") if not n.endswith(".lock")] == []
    assert os.listdir(cache / "tmp") == [] and os.listdir(tmp_path / "cache" / "s3-indexing") == []
    index_dir = tmp_path / "cache" / "s3-index"
    indexes = {name: os.stat(index_dir / name).st_mtime_ns for name in os.listdir(index_dir)}
    assert len(indexes) == SHARDS
    for name in indexes:
        with open(index_dir / name) as f:
            rows = json.load(f)["rows"]
        assert len(rows) == PER_SHARD
        assert all(int(label[1]) == label_of(key) for key, _, _, _, label in rows)
    loader = _check_epoch(f"s3://{BUCKET}/many/", _all_keys())
    assert loader.dataset.storage_stats()["shards_downloaded"] == 0
    assert {name: os.stat(index_dir / name).st_mtime_ns for name in indexes} == indexes  # reused


def _cache_bytes(root: str) -> int:
    """Bytes the node cache holds at one moment: published copies and fills in progress.

    The two folders are listed one after the other while files move between them
    (publish: tmp -> objects) and go (eviction), so summing the listings could add a
    file evicted after its listing to a fill that began after it. A file therefore
    counts once (by inode) and only if it still exists after both listings: all the
    files counted existed together at the moment the listings ended."""
    paths = []
    for folder in ("objects", "tmp"):
        try:
            paths += [e.path for e in os.scandir(os.path.join(root, folder)) if not e.name.endswith(".lock")]
        except FileNotFoundError:
            continue
    sizes = {}
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        sizes[(st.st_dev, st.st_ino)] = st.st_size
    return sum(sizes.values())


class _Watch:
    """Samples the cache's size every 0.5 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self, root: str) -> None:
        self.root, self.peak = root, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-cache-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _cache_bytes(self.root))
            time.sleep(0.0005)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def test_a_cache_smaller_than_the_data_stays_within_its_bound_under_concurrent_fills(
        server, bodies, tmp_path):
    """Room for 2.5 shards, 16 shards indexed 8 at a time through the cache while GETs
    take 5 ms (so fills overlap): the cache never holds more than its bound (fills in
    progress included), no reader loses its shard to eviction (FileNotFoundError), and
    the epoch is exact."""
    bound = int(2.5 * max(len(b) for b in bodies.values()))
    root = str(tmp_path / "cache" / "s3")
    with FaultProxy(server.endpoint, latency=0.005) as proxy:
        configure(S3Config(endpoint_url=proxy.endpoint, retry=FAST_RETRY, cache_max_bytes=bound,
                           part_size=4096, max_concurrency=8))
        with _Watch(root) as watch:
            _check_epoch(f"s3://{BUCKET}/many/", _all_keys())
    assert 0 < watch.peak <= bound, f"cache held {watch.peak} bytes, bound {bound}"


def test_eviction_never_removes_a_shard_while_it_is_being_indexed(server, bodies, tmp_path, monkeypatch):
    """Room for one shard only, 16 shards indexed by 8 threads through the cache, and
    indexing slowed down (a slow disk): each fill wants the room another thread's shard
    is being indexed from. No FileNotFoundError, every index right."""
    import turbofeed.io.stores.shards as s3_module

    real_build_index = s3_module.index_shard

    def slow_build_index(path: str) -> dict:
        time.sleep(0.02)
        return real_build_index(path)
    monkeypatch.setattr(s3_module, "index_shard", slow_build_index)
    bound = int(1.2 * max(len(b) for b in bodies.values()))
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=bound))
    for round in range(2):
        cache_dir = str(tmp_path / f"round{round}")
        ds = IndexedDataset(f"s3://{BUCKET}/many/", cache_dir=cache_dir)
        assert len(ds) == SHARDS * PER_SHARD
        keys = [k for s in ds.sources for k in s.table.keys]
        assert set(keys) == _all_keys()
        assert ds.labels.tolist() == [label_of(k) for k in keys]
        assert _cache_bytes(os.path.join(cache_dir, "s3")) <= bound
        ds.close()


def test_an_index_cached_by_an_earlier_version_is_not_trusted_blindly(bodies, tmp_path):
    """An index file left by a build that read the wrong bytes (same URL, ETag and size
    key) is rebuilt, not served: the persisted index is checked against the object."""
    configure(S3Config(retry=FAST_RETRY, cache_max_bytes=1))
    url = f"s3://{BUCKET}/many/shard-000003.tar"
    IndexedDataset(url).close()
    index_dir = tmp_path / "cache" / "s3-index"
    (name,) = os.listdir(index_dir)
    with open(index_dir / name) as f:
        good = json.load(f)
    bad = dict(good, rows=[[k, n, o, s, ["cls", "7"]] for k, n, o, s, _ in good["rows"][::2]])
    bad.pop("s3_index")  # what an index written before this check looked like
    with open(index_dir / name, "w") as f:
        json.dump(bad, f)
    close_clients()
    ds = IndexedDataset(url)
    assert len(ds) == PER_SHARD
    assert ds.labels.tolist() == [label_of(k) for k in ds.sources[0].table.keys]


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


@pytest.fixture(scope="module")
def mixed(server, bodies) -> dict[str, str]:
    """s3://tf-trust/mixed/: a good shard, a zero-byte .tar, a .tar.gz, a .tgz and a .tar.zst."""
    client = S3Client(S3Config(endpoint_url=server.endpoint, access_key_id="test",
                               secret_access_key="test"))
    urls = {"good": f"s3://{BUCKET}/mixed/a-good.tar", "empty": f"s3://{BUCKET}/mixed/b-empty.tar",
            "gz": f"s3://{BUCKET}/mixed/c-packed.tar.gz", "tgz": f"s3://{BUCKET}/mixed/d-packed.tgz",
            "zst": f"s3://{BUCKET}/mixed/e-packed.tar.zst"}
    client.put(urls["good"], _shard(0))
    client.put(urls["empty"], b"")
    client.put(urls["gz"], _gz(_shard(1)))
    client.put(urls["tgz"], _gz(_shard(2)))
    client.put(urls["zst"], b"\x28\xb5\x2f\xfd" + _shard(3))  # the zstd magic: never decoded
    client.close()
    return urls


def test_empty_and_zstd_objects_under_a_prefix_are_reported(mixed, caplog):
    configure(S3Config(retry=FAST_RETRY))
    caplog.set_level(logging.WARNING, logger="turbofeed")
    ds = IndexedDataset(f"s3://{BUCKET}/mixed/")
    assert len(ds) == 3 * PER_SHARD  # the .tar, .tar.gz and .tgz are read
    bad = [mixed["empty"], mixed["zst"]]
    assert sorted(ds.damaged) == bad
    for url in bad:
        assert any(url in r.getMessage() for r in caplog.records), f"no warning names {url}"
    assert any("zstd-compressed tar, not read" in r.getMessage() for r in caplog.records)
    loader = turbofeed.DataLoader(f"s3://{BUCKET}/mixed/", batch_size=8, num_workers=4)
    assert sorted(loader.stats.damaged_shards) == bad
    assert sorted(loader.stats.as_dict()["damaged_shards"]) == bad


def test_empty_and_zstd_objects_raise_under_on_error_raise(mixed):
    configure(S3Config(retry=FAST_RETRY))
    with pytest.raises(DatasetError, match="b-empty.tar"):
        turbofeed.DataLoader([mixed["good"], mixed["empty"]], batch_size=8, on_error="raise")
    with pytest.raises(DatasetError, match="e-packed.tar.zst"):
        turbofeed.DataLoader(f"s3://{BUCKET}/mixed/*.tar.zst", batch_size=8, on_error="raise")
    with pytest.raises(DatasetError, match=r"(b-empty.tar|e-packed.tar.zst)"):
        turbofeed.DataLoader(f"s3://{BUCKET}/mixed/", batch_size=8, on_error="raise")
