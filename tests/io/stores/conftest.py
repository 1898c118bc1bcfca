"""Fixtures of the object store tests.

- ``s3://`` (the ``test_s3_*``, ``test_streaming*``, ``test_cache`` and ``test_zarr_s3``
  modules): a local S3-compatible server (moto, on 127.0.0.1) per test module, and the node
  cache configuration of the streaming tests.
- the other stores (``served``): the same tar shards written locally and served by a real
  server on 127.0.0.1 for each store (``http``: a Range-capable HTTP server; ``azure``:
  Azurite; ``gcs``: gcp-storage-emulator). A store whose server cannot run here skips,
  saying why; their modules skip without obstore, the one reader of those stores."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import pytest
from builders import FAST_RETRY, small_jpeg, write_tar

sys.path.insert(0, os.path.dirname(__file__))
from servers import Azurite, GCSEmulator, RangeHTTPServer  # noqa: E402

SHARDS, PER_SHARD = 6, 8


@pytest.fixture(scope="module")
def server():
    """A local S3 server for the test module (moto: modules that use it skip without it)."""
    from turbofeed.testing import LocalS3Server

    with LocalS3Server() as srv:
        yield srv


@pytest.fixture
def config(server, data, point_aws_at):
    """The AWS variables point at ``server``; an :class:`S3Config` for it whose node cache
    holds 30% of the module's ``data`` (a fixture of the streaming modules:
    :func:`builders.upload_shards`'s dict)."""
    from turbofeed.io.stores.config import S3Config
    from turbofeed.io.stores.urls import close_clients

    point_aws_at(server.endpoint)
    yield S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test",
                   cache_max_bytes=int(0.3 * data["bytes"]), retry=FAST_RETRY)
    close_clients()


def members(shard: int) -> list[tuple[str, bytes]]:
    out = []
    for i in range(PER_SHARD):
        key = f"s{shard}-{i:02d}"
        out += [(f"{key}.jpg", small_jpeg(100 * shard + i)), (f"{key}.cls", str((shard + i) % 4).encode())]
    return out


@pytest.fixture(scope="session")
def local_shards(tmp_path_factory) -> dict:
    """The shards on local disk: ``folder``, ``names``, ``bytes`` (total) and ``largest``."""
    folder = tmp_path_factory.mktemp("store-shards")
    names = [f"shard-{s:04d}.tar" for s in range(SHARDS)]
    for s, name in enumerate(names):
        write_tar(str(folder / name), members(s))
    sizes = [os.path.getsize(folder / n) for n in names]
    return {"folder": str(folder), "names": names, "bytes": sum(sizes), "largest": max(sizes)}


def replace_object(served: "Served", name: str, body: bytes) -> None:
    """Put another version of the shard ``name`` on ``served``'s server."""
    if served.kind == "http":
        served.server.files[f"/data/{name}"] = body
        return
    from turbofeed.io.stores.client import S3Client
    from turbofeed.io.stores.config import S3Config

    client = S3Client(S3Config(**served.settings))
    client.put(served.prefix + name, body)
    client.close()


@dataclass
class Served:
    """One store's server holding the shards: ``spec`` (what a loader is given), ``prefix``
    (the shards' URL prefix), ``settings`` (S3Config fields that reach it) and ``server``
    (``stop()`` it for an outage)."""

    kind: str
    spec: str
    prefix: str
    server: object
    settings: dict = field(default_factory=dict)

    def config(self, **kw):
        from turbofeed.io.stores.config import S3Config

        kw.setdefault("retry", FAST_RETRY)
        return S3Config(**self.settings, **kw)


def serve(kind: str, shards: dict, workdir: str) -> Served:
    """Start ``kind``'s server and put the shards on it (skips when it cannot run here)."""
    from turbofeed.io.stores.client import S3Client
    from turbofeed.io.stores.config import S3Config
    from turbofeed.io.stores.families import AzureConfig, GCSConfig

    def blobs():
        for name in shards["names"]:
            with open(os.path.join(shards["folder"], name), "rb") as f:
                yield name, f.read()
    if kind == "http":
        srv = RangeHTTPServer()
        for name, body in blobs():
            srv.files[f"/data/{name}"] = body
        prefix = f"{srv.endpoint}/data/"
        return Served(kind, prefix + f"shard-{{0000..{SHARDS - 1:04d}}}.tar", prefix, srv)
    if kind == "azure":
        try:
            srv = Azurite(workdir)
        except RuntimeError as exc:
            pytest.skip(f"Azurite cannot run here: {exc}")
        srv.create_container("shards")
        settings = {"azure": AzureConfig(connection_string=srv.connection_string)}
        prefix = "az://shards/data/"
    else:
        try:
            srv = GCSEmulator()
        except RuntimeError as exc:
            pytest.skip(f"gcp-storage-emulator cannot run here: {exc}")
        srv.create_bucket("shards")
        settings = {"gcs": GCSConfig(endpoint_url=srv.endpoint)}
        prefix = "gs://shards/data/"
    client = S3Client(S3Config(**settings))
    for name, body in blobs():
        client.put(prefix + name, body)
    client.close()
    return Served(kind, prefix, prefix, srv, settings)


@pytest.fixture(params=["http", "azure", "gcs"])
def served(request, local_shards, tmp_path, monkeypatch):
    """The shards on a fresh server of each store (stopped after the test)."""
    from turbofeed.io.stores.urls import close_clients

    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("STORAGE_EMULATOR_HOST", "AZURE_STORAGE_CONNECTION_STRING"):
        monkeypatch.delenv(name, raising=False)
    os.makedirs(tmp_path / "server")
    out = serve(request.param, local_shards, str(tmp_path / "server"))
    yield out
    close_clients()
    out.server.stop()
