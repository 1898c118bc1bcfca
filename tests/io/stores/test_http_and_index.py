"""What differs between stores: an HTTP server cannot be listed (shards are named, brace
patterns expand) and takes tokens as headers; the dataset index is written next to the
data where the store takes writes (GCS, Azure) and into the index cache where it does not
(HTTP), and the next loader finds it there."""

from __future__ import annotations

import os

import pytest
from conftest import PER_SHARD, SHARDS, Served
from servers import RangeHTTPServer

import turbofeed
from turbofeed.errors import DatasetError
from turbofeed.io import IndexedDataset, HTTPConfig, S3Config, resolve
from turbofeed.io.dsindex import build_index
from turbofeed.io.paths import INDEX_NAME

pytest.importorskip("obstore")  # the one reader of these stores


@pytest.fixture
def http(local_shards, tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path / "cache"))
    srv = RangeHTTPServer(token="s3cret")
    for name in local_shards["names"]:
        with open(os.path.join(local_shards["folder"], name), "rb") as f:
            srv.files[f"/data/{name}"] = f.read()
    yield srv
    from turbofeed.io.stores.urls import close_clients

    close_clients()
    srv.stop()


@pytest.mark.parametrize("spec", ["/data/", "/data", "/data/*.tar", "/data/shard-0000.tar?x=1"])
def test_an_http_server_is_not_listed_and_the_error_says_how_to_name_shards(http, spec):
    with pytest.raises(DatasetError, match="cannot be listed|query string is refused"):
        resolve(http.endpoint + spec, storage=S3Config(http=HTTPConfig(headers={"Authorization": "Bearer s3cret"})))


def test_a_token_header_reaches_the_server_and_without_it_the_dataset_says_so(http, tmp_path):
    spec = f"{http.endpoint}/data/shard-{{0000..{SHARDS - 1:04d}}}.tar"
    with pytest.raises(DatasetError, match="401"):
        turbofeed.DataLoader(turbofeed.Dataset(spec, cache_dir=str(tmp_path)), batch_size=4)
    dl = turbofeed.DataLoader(turbofeed.Dataset(spec, cache_dir=str(tmp_path), storage=S3Config(http=HTTPConfig(headers={"Authorization": "Bearer s3cret"}))),
                              batch_size=4, return_keys=True,
                              transform=turbofeed.transforms.imagenet_eval(16))
    assert sum(len(b[2]) for b in dl) == SHARDS * PER_SHARD
    dl.close()


def test_the_index_goes_next_to_the_data_where_the_store_takes_writes_else_to_the_cache(served: Served, tmp_path):
    config = served.config()
    summary = build_index(served.spec, storage=config, cache_dir=str(tmp_path / "cache"))
    assert summary.shards == SHARDS and summary.samples == SHARDS * PER_SHARD
    if served.kind == "http":
        assert summary.path.startswith(str(tmp_path / "cache")) and os.path.exists(summary.path)
    else:
        assert summary.path == served.prefix + INDEX_NAME and not summary.note
    before = served.server.requests if served.kind == "http" else None
    found = IndexedDataset(served.spec, storage=config, cache_dir=str(tmp_path / "cache")).index
    assert found is not None and found.path == (summary.path if served.kind == "http" else found.path)
    dl = turbofeed.DataLoader(turbofeed.Dataset(served.spec, storage=config, cache_dir=str(tmp_path / "cache")),
                              batch_size=4,
                              return_keys=True, transform=turbofeed.transforms.imagenet_eval(16))
    assert sum(len(b[2]) for b in dl) == SHARDS * PER_SHARD
    if before is not None:
        assert served.server.requests > before
    dl.close()


def test_missing_http_shards_are_named_when_the_dataset_is_built(http):
    config = S3Config(http=HTTPConfig(headers={"Authorization": "Bearer s3cret"}))
    with pytest.raises(DatasetError, match=f"no such object: {http.endpoint}/data/shard-{SHARDS:04d}.tar$"):
        resolve(f"{http.endpoint}/data/shard-{{0000..{SHARDS:04d}}}.tar", storage=config)  # one too many
    assert len(resolve(f"{http.endpoint}/data/shard-{{0000..{SHARDS - 1:04d}}}.tar", storage=config)) == SHARDS
