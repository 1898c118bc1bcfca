"""Each store reached as its ecosystem's users set it up: GCS from ``STORAGE_EMULATOR_HOST``
(with or without its scheme, as Google's clients take it); Azure from
``AZURE_STORAGE_CONNECTION_STRING`` alone, under each of its URL spellings (``az://``,
``azure://``, ``abfs://``), listing prefixes and globs like ``s3://``."""

from __future__ import annotations

import pytest
from conftest import SHARDS, serve

from turbofeed.errors import DatasetError
from turbofeed.io import resolve
from turbofeed.io.stores.urls import close_clients

pytest.importorskip("obstore")  # the one reader of these stores


@pytest.fixture
def azurite(local_shards, tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path / "cache"))
    served = serve("azure", local_shards, str(tmp_path))
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", served.server.connection_string)
    yield served
    close_clients()
    served.server.stop()


@pytest.mark.parametrize("scheme", ["az", "azure", "abfs"])
@pytest.mark.parametrize("tail", ["data/", "data", "data/*.tar", f"data/shard-{{0000..{SHARDS - 1:04d}}}.tar"])
def test_azure_from_the_connection_string_variable_under_every_spelling(azurite, scheme, tail):
    urls = [url for kind, url in resolve(f"{scheme}://shards/{tail}")]
    assert urls == [f"{scheme}://shards/data/shard-{s:04d}.tar" for s in range(SHARDS)]


def test_a_missing_azure_prefix_or_blob_is_named(azurite):
    with pytest.raises(DatasetError, match="az://shards/nothing/: no .tar objects"):
        resolve("az://shards/nothing/")
    with pytest.raises(DatasetError, match="no such object: az://shards/data/shard-0099.tar"):
        resolve("az://shards/data/shard-0099.tar")


def test_use_development_storage_reaches_azurite(azurite, monkeypatch):
    # UseDevelopmentStorage=true is Azurite's well-known account; AZURITE_BLOB_STORAGE_URL
    # moves it off its default port 10000 (to the test's server)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", f"http://127.0.0.1:{azurite.server.port}")
    assert len(resolve("az://shards/data/")) == SHARDS


@pytest.fixture
def gcs(local_shards, tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path / "cache"))
    served = serve("gcs", local_shards, str(tmp_path))
    yield served
    close_clients()
    served.server.stop()


@pytest.mark.parametrize("host", ["http://127.0.0.1:{port}", "127.0.0.1:{port}"])
@pytest.mark.parametrize("tail", ["data/", "data/*.tar", f"data/shard-{{0000..{SHARDS - 1:04d}}}.tar"])
def test_gcs_from_storage_emulator_host_as_googles_clients_take_it(gcs, monkeypatch, host, tail):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", host.format(port=gcs.server.port))
    urls = [url for kind, url in resolve(f"gs://shards/{tail}")]
    assert urls == [f"gs://shards/data/shard-{s:04d}.tar" for s in range(SHARDS)]


def test_a_missing_gcs_prefix_or_object_is_named(gcs, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.server.endpoint)
    with pytest.raises(DatasetError, match="gs://shards/nothing/: no .tar objects"):
        resolve("gs://shards/nothing/")
    with pytest.raises(DatasetError, match="no such object: gs://shards/data/shard-0099.tar"):
        resolve("gs://shards/data/shard-0099.tar")


@pytest.mark.parametrize("kind", ["http", "gcs", "azure"])
def test_a_wrong_endpoint_fails_in_seconds_naming_where_to_fix_it(kind, tmp_path, monkeypatch):
    import time

    from builders import free_port
    from servers import AZ_ACCOUNT, AZ_KEY

    from turbofeed.io import AzureConfig, GCSConfig, S3Config

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    spec, config, hint = {
        "http": (f"{dead}/d/shard-{{0..1}}.tar", S3Config(), "check the URL"),
        "gcs": ("gs://b/d/", S3Config(gcs=GCSConfig(endpoint_url=dead)), "STORAGE_EMULATOR_HOST"),
        "azure": ("az://box/d/", S3Config(azure=AzureConfig(
            connection_string=f"AccountName={AZ_ACCOUNT};AccountKey={AZ_KEY};BlobEndpoint={dead}/{AZ_ACCOUNT}")),
            "AZURE_STORAGE_CONNECTION_STRING"),
    }[kind]
    t0 = time.monotonic()
    with pytest.raises(DatasetError, match=f"cannot connect to {dead}.*{hint}"):
        resolve(spec, storage=config)
    assert time.monotonic() - t0 < 15
    close_clients()
