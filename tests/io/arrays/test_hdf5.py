"""io.arrays.hdf5: pixels and encoded images in HDF5 files written with h5py as users write them;
reads are checked against the arrays/bytes that went in, and every broken file or
missing dataset fails with the file and the names that exist."""

from __future__ import annotations

import logging
import os
import threading

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from turbofeed.errors import DatasetError, SampleError  # noqa: E402
from turbofeed.io import IndexedDataset, HDF5Source  # noqa: E402
from turbofeed.io.arrays.blocks import BLOCKS  # noqa: E402


def test_contiguous_pixels_are_mapped_zero_copy(fixed_images, array_dataset):
    src = HDF5Source(array_dataset("hdf5-pixels"))
    pixels = fixed_images["pixels"]
    assert src.read_mode == "mmap" and src.encoded is False
    assert src.table.keys == fixed_images["keys"]  # no keys dataset: row numbers
    assert src.table.labels == fixed_images["labels"]
    for i in (0, 17, 47):
        got = src.read(i)
        assert isinstance(got, np.memmap) and not got.flags.owndata  # a view into the file
        np.testing.assert_array_equal(got, pixels[i])
    src.close()


def test_h5py_reads_without_mmap(fixed_images, array_dataset):
    src = HDF5Source(array_dataset("hdf5-pixels"), {"mmap": False})
    assert src.read_mode == "h5py"
    np.testing.assert_array_equal(src.read(5), fixed_images["pixels"][5])


def test_userblock_offset_is_honoured(tmp_path, fixed_images):
    """Dataset offsets count from after a user block; the mapping must add it."""
    path = str(tmp_path / "ub.h5")
    with h5py.File(path, "w", userblock_size=1024) as f:
        f.create_dataset("images", data=fixed_images["pixels"])
    src = HDF5Source(path)
    assert src.read_mode == "mmap"
    np.testing.assert_array_equal(src.read(3), fixed_images["pixels"][3])


def test_compressed_chunks_are_loaded_once_per_epoch(fixed_images, array_dataset):
    """Chunks of 8 gzip'd images: a shuffled pass loads each chunk row exactly once when
    the block cache holds the dataset, and serves the other 7 samples from memory."""
    src = HDF5Source(array_dataset("hdf5-gzip"))
    assert src.read_mode == "chunk-rows"
    order = np.random.default_rng(0).permutation(48)
    for i in order:
        np.testing.assert_array_equal(src.read(int(i)), fixed_images["pixels"][i])
    stats = src.io_stats()
    assert stats["blocks"] == 6 and stats["block_loads"] == 6
    assert stats["samples"] == 48 and stats["block_hits"] == 42
    src.close()


def test_small_cache_rereads_and_says_so(fixed_images, array_dataset, monkeypatch, caplog):
    """With a cache of 2 chunks the same pass reloads chunks, the counts show it, and opening
    the file warns how much more a shuffled epoch will read."""
    chunk_bytes = 8 * fixed_images["pixels"][0].nbytes
    monkeypatch.setattr(BLOCKS, "budget", 2 * chunk_bytes)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        src = HDF5Source(array_dataset("hdf5-gzip"))
    assert "shuffled epoch will read about" in caplog.text and "hdf5-gzip.h5" in caplog.text
    for i in np.random.default_rng(0).permutation(48):
        np.testing.assert_array_equal(src.read(int(i)), fixed_images["pixels"][i])
    assert src.io_stats()["block_loads"] > 6
    src.close()


def test_vlen_encoded_images_with_keys_and_class_names(tmp_path, fixed_images):
    path = str(tmp_path / "enc.h5")
    jpegs = fixed_images["jpegs"][:6]
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("data/jpeg", (6,), dtype=h5py.vlen_dtype(np.uint8), chunks=(3,),
                              compression="gzip")
        for i, jpg in enumerate(jpegs):
            ds[i] = np.frombuffer(jpg, np.uint8)
        f.create_dataset("data/cls", data=["dog", "cat", "emu", "cat", "dog", "dog"], dtype=h5py.string_dtype())
        f.create_dataset("data/ids", data=[f"img-{i}" for i in range(6)], dtype=h5py.string_dtype())
    options = {"images": "data/jpeg", "labels": "data/cls", "keys": "data/ids"}
    src = HDF5Source(path, options)
    assert src.encoded is True and src.read_mode == "chunk-rows"
    assert [src.read(i) for i in range(6)] == jpegs
    assert src.table.keys == [f"img-{i}" for i in range(6)]
    ds = IndexedDataset(path, format_options=options)
    assert ds.class_names == ["cat", "dog", "emu"] and ds.labels.tolist() == [1, 0, 2, 0, 1, 1]


def test_opaque_elements_and_one_dataset_per_sample(tmp_path, fixed_images):
    jpg, pixels = fixed_images["jpegs"][0], fixed_images["pixels"][1]
    path = str(tmp_path / "mixed.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("opaque", data=np.array([np.void(jpg), np.void(jpg)]))
        group = f.create_group("samples")
        group.create_dataset("b", data=np.frombuffer(jpg, np.uint8)).attrs["label"] = 4
        group.create_dataset("a", data=pixels).attrs["label"] = 2
    assert HDF5Source(path, {"images": "opaque", "labels": None}).read(1) == jpg
    src = HDF5Source(path, {"images": "samples"})
    assert src.table.keys == ["a", "b"] and src.table.labels == [2, 4]  # sorted names, label attrs
    np.testing.assert_array_equal(src.read(0), pixels)
    assert src.read(1) == jpg


def test_threads_read_concurrently(fixed_images, array_dataset):
    """h5py serialises calls; many threads at once still get the right samples."""
    for layout in ("hdf5-gzip", "hdf5-jpeg"):
        src = HDF5Source(array_dataset(layout))
        errors = []

        def reader(seed: int) -> None:
            for i in np.random.default_rng(seed).integers(0, 48, 60):
                got = src.read(int(i))
                want = fixed_images["jpegs"][i] if src.encoded else fixed_images["pixels"][i]
                if not (got == want if src.encoded else np.array_equal(got, want)):
                    errors.append(int(i))
        threads = [threading.Thread(target=reader, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        src.close()


# -- errors --------------------------------------------------------------------------
def test_not_an_hdf5_file(tmp_path):
    path = tmp_path / "fake.h5"
    path.write_bytes(b"not hdf5 at all" * 100)
    with pytest.raises(DatasetError, match="not a readable HDF5 file") as info:
        IndexedDataset(str(path))
    assert str(path) in str(info.value)


def test_missing_images_lists_what_exists(tmp_path, fixed_images):
    path = str(tmp_path / "other.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x_train", data=fixed_images["pixels"][:4])
        f.create_dataset("y_train", data=np.arange(4))
    with pytest.raises(DatasetError) as info:
        HDF5Source(path)
    message = str(info.value)
    assert path in message and "'images'" in message and "x_train (4, 40, 56, 3) uint8" in message
    assert "format_options" in message
    src = HDF5Source(path, {"images": "x_train", "labels": "y_train"})
    assert src.table.labels == [0, 1, 2, 3]
    with pytest.raises(DatasetError, match="no labels dataset 'targets'.*y_train"):
        HDF5Source(path, {"images": "x_train", "labels": "targets"})


@pytest.mark.parametrize("data,match", [
    (np.zeros((4, 8, 8, 3), np.float32), "dtype float32"),
    (np.zeros((4, 8, 8, 2), np.uint8), r"shape \(4, 8, 8, 2\)"),
    (np.zeros((4, 8), np.uint8), r"shape \(4, 8\)"),
])
def test_unusable_images_dataset(tmp_path, data, match):
    path = str(tmp_path / "bad.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=data)
    with pytest.raises(DatasetError, match=match):
        HDF5Source(path)


def test_labels_of_another_length(tmp_path, fixed_images):
    path = str(tmp_path / "short.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=fixed_images["pixels"][:5])
        f.create_dataset("labels", data=np.arange(3))
    with pytest.raises(DatasetError, match="'labels' has 3 labels for 5 images"):
        HDF5Source(path)


def test_corrupt_chunk_is_a_sample_error(tmp_path, fixed_images):
    """A damaged compressed chunk fails the samples in it (with file and key), not the run."""
    turbofeed = pytest.importorskip("turbofeed")
    pytest.importorskip("torch")
    from turbofeed import transforms as T

    path = str(tmp_path / "damaged.h5")
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("images", data=fixed_images["pixels"][:16], chunks=(8, 40, 56, 3),
                              compression="gzip")
        f.create_dataset("labels", data=np.arange(16))
        offset, size = ds.id.get_chunk_info(1).byte_offset, ds.id.get_chunk_info(1).size
    with open(path, "r+b") as f:
        f.seek(offset + size // 3)
        f.write(os.urandom(64))
    loader = turbofeed.DataLoader(path, batch_size=16, num_workers=2, transform=[T.CenterCrop(16)],
                                  on_error="raise")
    with pytest.raises(SampleError) as info:
        next(iter(loader))
    assert info.value.stage == "fetch" and info.value.shard == path and int(info.value.key) >= 8
    loader = turbofeed.DataLoader(path, batch_size=8, num_workers=2, transform=[T.CenterCrop(16)],
                                  on_error="skip")
    batches = list(loader)
    assert [len(labels) for _, labels in batches] == [8, 0]  # "skip": the damaged chunk's batch is empty
    assert loader.stats.as_dict()["errors"]["fetch"] == 8
