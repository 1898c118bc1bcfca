"""io.arrays.npy: memory-mapped image arrays with sibling labels/keys files; zero-copy reads and
clear errors for truncated or foreign files."""

from __future__ import annotations

import os

import numpy as np
import pytest

from turbofeed.errors import DatasetError
from turbofeed.io import IndexedDataset, NpySource, resolve


def test_folder_of_images_labels_keys(fixed_images, array_dataset):
    folder = array_dataset("npy")
    images = os.path.join(folder, "images.npy")
    assert resolve(folder) == [("npy", images)]  # labels.npy and keys.npy are siblings, not sources
    src = NpySource(images)
    assert src.labels_path.endswith("labels.npy") and src.keys_path.endswith("keys.npy")
    assert src.table.labels == fixed_images["labels"] and src.table.keys == fixed_images["keys"]
    got = src.read(7)
    np.testing.assert_array_equal(got, fixed_images["pixels"][7])
    assert isinstance(got, np.memmap) and not got.flags.writeable  # a read-only view of the file


def test_named_siblings_and_options(tmp_path, fixed_images):
    pixels = fixed_images["pixels"][:6]
    np.save(tmp_path / "train.npy", pixels)
    np.save(tmp_path / "train.labels.npy", np.array(["cat", "dog", "cat", "emu", "dog", "cat"]))
    np.save(tmp_path / "targets.npy", np.arange(6) * 10)
    src = NpySource(str(tmp_path / "train.npy"))
    assert src.table.labels == ["cat", "dog", "cat", "emu", "dog", "cat"]
    assert src.table.keys == [f"{i:08d}" for i in range(6)]
    ds = IndexedDataset(str(tmp_path / "train.npy"))
    assert ds.class_names == ["cat", "dog", "emu"] and ds.labels.tolist() == [0, 1, 0, 2, 1, 0]
    assert NpySource(str(tmp_path / "train.npy"), {"labels": "targets.npy"}).table.labels == [0, 10, 20, 30, 40, 50]
    assert NpySource(str(tmp_path / "train.npy"), {"labels": None}).table.labels == [None] * 6


def test_grayscale_and_rgba_arrays(tmp_path):
    np.save(tmp_path / "gray.npy", np.zeros((2, 5, 7), np.uint8))
    np.save(tmp_path / "rgba.npy", np.zeros((2, 5, 7, 4), np.uint8))
    assert NpySource(str(tmp_path / "gray.npy")).read(1).shape == (5, 7)
    assert NpySource(str(tmp_path / "rgba.npy")).read(1).shape == (5, 7, 4)


# -- errors --------------------------------------------------------------------------
def test_truncated_file(tmp_path, fixed_images):
    path = tmp_path / "cut.npy"
    np.save(path, fixed_images["pixels"])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="truncated") as info:
        IndexedDataset(str(path))
    assert str(path) in str(info.value)


def test_not_npy_wrong_dtype_bad_labels(tmp_path):
    fake = tmp_path / "fake.npy"
    fake.write_bytes(b"PK\x03\x04 not an array")
    with pytest.raises(DatasetError, match="not a readable .npy"):
        NpySource(str(fake))
    np.save(tmp_path / "f.npy", np.zeros((3, 4, 4, 3), np.float32))
    with pytest.raises(DatasetError, match="dtype float32"):
        NpySource(str(tmp_path / "f.npy"))
    np.save(tmp_path / "x.npy", np.zeros((3, 4, 4, 3), np.uint8))
    np.save(tmp_path / "x_labels.npy", np.arange(4))
    with pytest.raises(DatasetError, match="4 labels for 3 images"):
        NpySource(str(tmp_path / "x.npy"))
    np.save(tmp_path / "x_labels.npy", np.array([{"a": 1}] * 3, dtype=object))
    with pytest.raises(DatasetError, match="labels not a readable .npy"):
        NpySource(str(tmp_path / "x.npy"))
    with pytest.raises(DatasetError, match="no labels file"):
        NpySource(str(tmp_path / "x.npy"), {"labels": "absent.npy"})


def test_labels_file_is_not_a_dataset(tmp_path):
    np.save(tmp_path / "labels.npy", np.arange(3))
    with pytest.raises(DatasetError, match="labels/keys file"):
        resolve(str(tmp_path / "labels.npy"))
