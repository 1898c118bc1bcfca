"""``https://`` shards are told apart by what their server gives: a strong ETag where there
is one (sent as ``If-Match``); with a weak ETag (Express, serve-static, some CDNs) or none
(nginx with ``etag off``), Last-Modified and size, checked on every read; with nothing at
all, nothing indexed or cached is believed by another loader, and one warning says why.

Each case replaces a shard by a version of the same size whose labels differ, on a real
server on 127.0.0.1 (servers.py) that sends only what such a server sends."""

from __future__ import annotations

import logging
import os

import pytest
from builders import FAST_RETRY, tar_bytes
from conftest import PER_SHARD, SHARDS, members
from servers import RangeHTTPServer

import turbofeed
from turbofeed.io import S3Config
from turbofeed.io.retry import RetryPolicy

pytest.importorskip("obstore")  # the one reader of these stores
torch = pytest.importorskip("torch")

# The kinds of server: (ETag sent, Last-Modified sent).
KINDS = {"etag off": (None, True), "weak etag": ("weak", True), "nothing": (None, False),
         "weak etag only": ("weak", False)}
NAME = "shard-0000.tar"


def relabelled(shard: int) -> bytes:
    """Shard ``shard`` again, every label one higher (mod 4): the same size, other labels."""
    return tar_bytes([(name, str((int(body) + 1) % 4).encode() if name.endswith(".cls") else body)
                      for name, body in members(shard)])


@pytest.fixture(params=list(KINDS))
def web(request, local_shards, tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path / "cache"))
    etags, modified = KINDS[request.param]
    srv = RangeHTTPServer(etags=etags, last_modified=modified)
    for name in local_shards["names"]:
        with open(os.path.join(local_shards["folder"], name), "rb") as f:
            srv.files[f"/data/{name}"] = f.read()
    srv.kind = request.param
    yield srv
    from turbofeed.io.stores.urls import close_clients

    close_clients()
    srv.stop()


def _loader(srv, tmp_path, storage: S3Config | None = None, **kw) -> turbofeed.DataLoader:
    data = turbofeed.Dataset(f"{srv.endpoint}/data/shard-{{0000..{SHARDS - 1:04d}}}.tar",
                             storage=storage or S3Config(retry=FAST_RETRY), cache_dir=str(tmp_path / "cache"))
    return turbofeed.DataLoader(data, batch_size=4, num_workers=2, shuffle=False, return_keys=True,
                                transform=turbofeed.transforms.imagenet_eval(16), **kw)


def _labels(loader) -> dict[str, int]:
    return {k.rsplit("/", 1)[-1]: int(label) for batch in loader for label, k in zip(batch[1], batch[2])}


def test_a_shard_replaced_between_loaders_is_read_in_its_new_version(web, tmp_path):
    first = _labels(_loader(web, tmp_path))
    assert len(first) == SHARDS * PER_SHARD
    new = relabelled(0)
    assert len(new) == len(web.files[f"/data/{NAME}"])
    web.files[f"/data/{NAME}"] = new
    second = _labels(_loader(web, tmp_path))
    for key, label in first.items():
        want = (label + 1) % 4 if key.startswith("s0-") else label
        assert second[key] == want, f"{key}: {second[key]} (the old version's label: {label})"


def test_a_shard_replaced_mid_epoch_raises_instead_of_mixing_versions(web, tmp_path):
    if web.kind in ("nothing", "weak etag only"):
        pytest.skip("nothing but the size tells versions apart: a replacement of the same size is not seen")
    config = S3Config(retry=RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005), cache_max_bytes=1)
    dl = _loader(web, tmp_path, storage=config, prefetch=1)
    it = iter(dl)
    next(it)
    last = f"shard-{SHARDS - 1:04d}.tar"
    web.files[f"/data/{last}"] = relabelled(SHARDS - 1)
    with pytest.raises(turbofeed.StorageError) as info:
        for _ in it:
            pass
    assert info.value.shard.endswith(last) and "replaced" in info.value.reason
    dl.close()


def test_a_server_that_gives_nothing_to_tell_versions_apart_is_named_in_one_warning(web, tmp_path, caplog):
    caplog.set_level(logging.WARNING, "turbofeed")
    _labels(_loader(web, tmp_path))
    said = [r.getMessage() for r in caplog.records if "tells" in r.getMessage()]
    if web.kind in ("etag off", "weak etag"):
        assert said == []
    else:
        assert len(said) == 1 and NAME in said[0] and f"and {SHARDS - 1} more" in said[0]
