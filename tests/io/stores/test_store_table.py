"""The store table (issue 38, item 4): each URL scheme maps to its store family's row of
``STORES``, a ``Registry`` as the data formats' ``KINDS`` is, and the client makes each
family's obstore store and names its endpoint from that row."""

from __future__ import annotations

import pytest

from turbofeed.base.registry import Registry
from turbofeed.io.registry import KINDS
from turbofeed.io.stores import families
from turbofeed.io.stores.client import S3Client
from turbofeed.io.stores.config import S3Config
from turbofeed.io.stores.families import ENV_PREFIXES, FAMILIES, REMOTE_PREFIXES, STORES, HTTPConfig, family

SCHEMES = {"s3": "s3", "gs": "gcs", "az": "azure", "azure": "azure", "abfs": "azure", "abfss": "azure",
           "http": "http", "https": "http"}


def test_each_scheme_maps_to_its_store():
    assert FAMILIES == SCHEMES
    assert REMOTE_PREFIXES == tuple(f"{s}://" for s in SCHEMES)
    for scheme, name in SCHEMES.items():
        assert family(f"{scheme}://bucket/x.tar") == name and scheme in STORES[name].schemes
    assert set(ENV_PREFIXES) == {"AWS_", "GOOGLE_", "STORAGE_EMULATOR_HOST", "AZURE_", "AZURITE_"}
    assert {s.name: s.config for s in STORES.values()} == {"s3": "S3Config", "gcs": "GCSConfig",
                                                          "azure": "AzureConfig", "http": "HTTPConfig"}


def test_formats_and_stores_share_one_registry_api():
    assert isinstance(KINDS, Registry) and isinstance(STORES, Registry)
    with pytest.raises(KeyError, match="no store named 'ftp' .registered: s3, gcs, azure, http"):
        STORES["ftp"]
    with pytest.raises(ValueError, match="registered already"):
        STORES.register(STORES["s3"])


def test_the_client_makes_each_store_from_its_row():
    pytest.importorskip("obstore")
    from obstore.store import GCSStore, HTTPStore, S3Store

    config = S3Config(endpoint_url="http://127.0.0.1:9", anonymous=True, http=HTTPConfig(headers={"X-A": "1"}))
    client = S3Client(config)
    try:
        made = {url: client.obstore_store(url) for url in ("s3://b/x.tar", "gs://b/x.tar", "https://h:8/x.tar")}
        assert isinstance(made["s3://b/x.tar"], S3Store) and isinstance(made["gs://b/x.tar"], GCSStore)
        assert isinstance(made["https://h:8/x.tar"], HTTPStore)
        assert client.endpoint_of("s3://b/x.tar") == "http://127.0.0.1:9"
        assert client.endpoint_of("https://h:8/x.tar") == "https://h:8"
        assert client.endpoint_of("gs://b/x.tar") == (families.gcs_endpoint(None) or "https://storage.googleapis.com")
    finally:
        client.close()
