"""io.arrays.zarr: Zarr v2 and v3 stores written with zarr-python; pixels and encoded bytes,
chunk rows loaded once per epoch, and clear errors for broken or foreign stores."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

from turbofeed.errors import DatasetError  # noqa: E402
from turbofeed.io import IndexedDataset, ZarrSource, resolve  # noqa: E402

V3 = int(zarr.__version__.split(".")[0]) >= 3
VERSIONS = [2, 3] if V3 else [2]
# zarr-python warns that vlen-bytes and fixed-width strings have no v3 spec yet
pytestmark = pytest.mark.filterwarnings("ignore:The data type")


def _group(path: str, version: int):
    if V3:
        return zarr.open_group(path, mode="w", zarr_format=version)
    return zarr.open_group(path, mode="w")


def _array(group, name: str, data: np.ndarray, chunks: tuple | None = None):
    if V3:
        arr = group.create_array(name, shape=data.shape, chunks=chunks or data.shape, dtype=data.dtype)
    else:
        arr = group.create_dataset(name, shape=data.shape, chunks=chunks or data.shape, dtype=data.dtype)
    arr[:] = data
    return arr


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("rows", [1, 8])
def test_pixels_labels_keys(tmp_path, fixed_images, version, rows):
    pixels = fixed_images["pixels"]
    path = str(tmp_path / "data.zarr")
    group = _group(path, version)
    _array(group, "images", pixels, (rows, *pixels.shape[1:]))
    _array(group, "labels", np.array(fixed_images["labels"]))
    _array(group, "keys", np.array([f"s{i}" for i in range(48)], dtype="U8"))
    src = ZarrSource(path)
    assert src.zarr_format == version and src.encoded is False
    assert src.read_mode == ("chunk-rows" if rows > 1 else "per-sample chunks")
    assert src.table.labels == fixed_images["labels"] and src.table.keys[5] == "s5"
    for i in np.random.default_rng(1).permutation(48):
        np.testing.assert_array_equal(src.read(int(i)), pixels[i])
    if rows > 1:  # every chunk row loaded once, the other samples from the cache
        assert src.io_stats()["block_loads"] == 6 and src.io_stats()["block_hits"] == 42
    src.close()


@pytest.mark.skipif(not V3, reason="variable-length bytes arrays need zarr-python 3")
@pytest.mark.parametrize("version", VERSIONS)
def test_encoded_images_keep_every_byte(tmp_path, fixed_images, version):
    """Variable-length bytes come back whole, trailing NUL bytes included."""
    from zarr.core.dtype import VariableLengthBytes

    path = str(tmp_path / "enc.zarr")
    group = _group(path, version)
    payloads = fixed_images["jpegs"][:5] + [b"\xff\xd8\xff" + b"\x00" * 7]
    arr = group.create_array("images", shape=(6,), chunks=(4,), dtype=VariableLengthBytes())
    arr[:] = np.array(payloads, dtype=object)
    _array(group, "labels", np.array(["b", "a", "b", "c", "a", "a"], dtype="U1"))
    src = ZarrSource(path)
    assert src.encoded is True
    assert [src.read(i) for i in range(6)] == payloads
    ds = IndexedDataset(path)
    assert ds.class_names == ["a", "b", "c"] and ds.labels.tolist() == [1, 0, 1, 2, 0, 0]


@pytest.mark.parametrize("version", VERSIONS)
def test_store_detected_by_metadata_and_root_array(tmp_path, fixed_images, version):
    """A store without the .zarr suffix is recognised by its metadata; a root array is the images."""
    path = str(tmp_path / "plain-dir")
    if V3:
        arr = zarr.create_array(path, shape=(4, 40, 56, 3), chunks=(1, 40, 56, 3), dtype="uint8",
                                zarr_format=version)
    else:
        arr = zarr.open_array(path, mode="w", shape=(4, 40, 56, 3), chunks=(1, 40, 56, 3), dtype="uint8")
    arr[:] = fixed_images["pixels"][:4]
    assert resolve(path) == [("zarr", path)]
    ds = IndexedDataset(path)
    assert len(ds) == 4 and ds.labels.tolist() == [-1] * 4
    np.testing.assert_array_equal(ds.read(2), fixed_images["pixels"][2])


def test_v2_and_v3_stores_read_alike(array_dataset):
    if not V3:
        pytest.skip("zarr v3 stores need zarr-python 3")
    a, b = IndexedDataset(array_dataset("zarr2-pixels")), IndexedDataset(array_dataset("zarr3-pixels"))
    assert a.sources[0].zarr_format == 2 and b.sources[0].zarr_format == 3
    assert a.labels.tolist() == b.labels.tolist()
    for g in (0, 31, 47):
        np.testing.assert_array_equal(a.read(g), b.read(g))


# -- errors --------------------------------------------------------------------------
def test_not_a_store(tmp_path):
    path = tmp_path / "empty.zarr"
    path.mkdir()
    with pytest.raises(DatasetError, match="not a readable Zarr store") as info:
        IndexedDataset(str(path))
    assert str(path) in str(info.value)


@pytest.mark.parametrize("version", VERSIONS)
def test_missing_array_lists_what_exists(tmp_path, fixed_images, version):
    path = str(tmp_path / "other.zarr")
    group = _group(path, version)
    _array(group, "pixels", fixed_images["pixels"][:3])
    _array(group, "y", np.arange(3))
    with pytest.raises(DatasetError) as info:
        ZarrSource(path)
    assert path in str(info.value) and "'images'" in str(info.value)
    assert "pixels (3, 40, 56, 3) uint8" in str(info.value)
    src = ZarrSource(path, {"images": "pixels", "labels": "y"})
    assert src.table.labels == [0, 1, 2]
    with pytest.raises(DatasetError, match="no labels array 'target'"):
        ZarrSource(path, {"images": "pixels", "labels": "target"})


@pytest.mark.parametrize("version", VERSIONS)
def test_wrong_dtype_and_short_labels(tmp_path, version):
    path = str(tmp_path / "f.zarr")
    group = _group(path, version)
    _array(group, "images", np.zeros((3, 4, 4, 3), np.float32))
    with pytest.raises(DatasetError, match="dtype float32"):
        ZarrSource(path)
    shutil.rmtree(path)
    group = _group(path, version)
    _array(group, "images", np.zeros((3, 4, 4, 3), np.uint8))
    _array(group, "labels", np.arange(2))
    with pytest.raises(DatasetError, match="2 labels for 3 images"):
        ZarrSource(path)


@pytest.mark.parametrize("version", VERSIONS)
def test_corrupt_chunk_is_a_sample_error(tmp_path, fixed_images, version):
    """A chunk file overwritten with rubbish fails that sample's read, naming store and key;
    the samples of other chunks still read."""
    pytest.importorskip("torch")
    import turbofeed
    from turbofeed import transforms as T

    path = str(tmp_path / "damaged.zarr")
    group = _group(path, version)
    _array(group, "images", fixed_images["pixels"][:4], (1, 40, 56, 3))
    chunk = os.path.join(path, "images", "1.0.0.0") if version == 2 else \
        os.path.join(path, "images", "c", "1", "0", "0", "0")
    with open(chunk, "wb") as f:
        f.write(b"rubbish" * 50)
    src = ZarrSource(path)
    with pytest.raises(Exception):
        src.read(1)
    np.testing.assert_array_equal(src.read(2), fixed_images["pixels"][2])
    loader = turbofeed.DataLoader(path, batch_size=4, num_workers=2, transform=[T.CenterCrop(16)],
                                  on_error="raise", return_keys=True)
    with pytest.raises(turbofeed.SampleError) as info:
        next(iter(loader))
    assert info.value.shard == path and info.value.key == "00000001" and info.value.stage == "fetch"
