"""A Zarr v3 store on S3 (moto on 127.0.0.1) reads like the same store on local disk:
same samples, same order for a seed; a missing store names its URL."""

from __future__ import annotations

import os

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
pytest.importorskip("moto")
pytest.importorskip("obstore")
if int(zarr.__version__.split(".")[0]) < 3:
    pytest.skip("s3:// Zarr stores need zarr-python 3", allow_module_level=True)

import turbofeed  # noqa: E402
from turbofeed.errors import DatasetError  # noqa: E402
from turbofeed.io import IndexedDataset  # noqa: E402
from turbofeed.io.stores.client import S3Client  # noqa: E402
from turbofeed.io.stores.urls import close_clients  # noqa: E402
from turbofeed.testing import LocalS3Server  # noqa: E402
from turbofeed import S3Config  # noqa: E402

BUCKET = "tf-zarr"


@pytest.fixture(scope="module")
def store(tmp_path_factory, fixed_images):
    """The fixed images as a local Zarr v3 store (chunks of 8 rows) and its s3:// copy."""
    path = str(tmp_path_factory.mktemp("zarr") / "data.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    pixels = fixed_images["pixels"]
    group.create_array("images", shape=pixels.shape, chunks=(8, *pixels.shape[1:]), dtype="uint8")[:] = pixels
    group.create_array("labels", shape=(len(pixels),), dtype="int64")[:] = np.array(fixed_images["labels"])
    with LocalS3Server() as server:
        config = S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test",
                          region="us-east-1")
        client = S3Client(config)
        client.boto3_client().create_bucket(Bucket=BUCKET)
        for folder, _, files in os.walk(path):
            for name in files:
                local = os.path.join(folder, name)
                with open(local, "rb") as f:
                    client.put(f"s3://{BUCKET}/sets/data.zarr/{os.path.relpath(local, path)}", f.read())
        client.close()
        yield path, f"s3://{BUCKET}/sets/data.zarr", config
        close_clients()


def _epoch(data, config) -> list:
    loader = turbofeed.DataLoader(turbofeed.Dataset(data, storage=config), batch_size=10, num_workers=2, shuffle=True,
                                  seed=5,
                                  return_keys=True, on_error="raise",
                                  transform=turbofeed.transforms.imagenet_train(32))
    return [(x.clone(), y.clone(), k) for x, y, k in loader]


def test_s3_store_gives_the_local_epoch(store, tmp_path, monkeypatch):
    local, url, config = store
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path / "cache"))
    remote_ds = IndexedDataset(url, storage=config)
    assert len(remote_ds) == 48
    remote_ds.close()
    a, b = _epoch(local, config), _epoch(url, config)
    assert [k for _, _, k in a] == [k for _, _, k in b]
    for (xa, ya, _), (xb, yb, _) in zip(a, b):
        assert (ya == yb).all() and (xa == xb).all()


def test_missing_store_names_the_url(store, tmp_path, monkeypatch):
    _, url, config = store
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(DatasetError, match="nothing.zarr"):
        IndexedDataset(url.replace("data.zarr", "nothing.zarr"), storage=config)
