"""The same 48 images stored as tar+JPEG, HDF5 (pixels, gzip chunks, JPEG bytes), Zarr v2/v3,
.npy and Parquet go through the loader identically: same keys in the same order for a
seed, same labels, same pixels after the same random crops, on every rank, across resume.
Also: format detection, ``format=``, ``format_options`` checks, and missing extras."""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest
from resume_check import check_resume

from turbofeed.errors import DatasetError
from turbofeed.io import IndexedDataset, MissingExtra, resolve

torch = pytest.importorskip("torch")
import turbofeed  # noqa: E402
from turbofeed import transforms as T  # noqa: E402

LAYOUTS = ["hdf5-pixels", "hdf5-gzip", "hdf5-jpeg", "zarr2-pixels", "zarr3-pixels", "zarr3-jpeg", "npy",
           "parquet"]
pytestmark = pytest.mark.filterwarnings("ignore:The data type")  # zarr v3 vlen-bytes


def _epochs(data, epochs=2, **kwargs) -> list[tuple[np.ndarray, list[int], list[str]]]:
    """(images, labels, keys without the source name) of every batch of ``epochs`` epochs."""
    options = dict(batch_size=10, num_workers=2, shuffle=True, seed=7, return_keys=True,
                   transform=[T.RandomResizedCrop(24), T.RandomHorizontalFlip()])
    options.update(kwargs)
    loader = turbofeed.DataLoader(data, **options)
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels, keys in loader:
            out.append((images.numpy().copy(), labels.tolist(), [k.split("/", 1)[1] for k in keys]))
    loader.close()
    return out


@pytest.fixture(scope="module")
def tar_epochs(fixed_images):
    return _epochs(fixed_images["tar_dir"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_epochs_match_the_tar_source(layout, fixed_images, array_dataset, tar_epochs):
    """Same order for the seed, same sample multiset, same pixels after the same crops."""
    if layout.startswith("zarr3"):
        pytest.importorskip("zarr", minversion="3")
    got = _epochs(array_dataset(layout))
    assert [keys for _, _, keys in got] == [keys for _, _, keys in tar_epochs]
    assert [labels for _, labels, _ in got] == [labels for _, labels, _ in tar_epochs]
    for (mine, _, _), (ref, _, _) in zip(got, tar_epochs):
        np.testing.assert_array_equal(mine, ref)
    per_epoch = len(got) // 2
    for epoch in range(2):  # each epoch is every sample exactly once
        keys = [k for _, _, ks in got[epoch * per_epoch:(epoch + 1) * per_epoch] for k in ks]
        assert sorted(keys) == fixed_images["keys"]
    assert [k for _, _, ks in got[:per_epoch] for k in ks] != fixed_images["keys"]  # shuffled


@pytest.mark.parametrize("layout", ["hdf5-gzip", "npy", "parquet"])
def test_ranks_and_resume_match_the_tar_source(layout, fixed_images, array_dataset):
    """Rank 1 of 2 gets the tar source's share; a resumed loader continues identically."""
    kwargs = dict(enable_distributed=True, rank=1, world_size=2, epochs=1)
    tar, mine = _epochs(fixed_images["tar_dir"], **kwargs), _epochs(array_dataset(layout), **kwargs)
    assert [k for _, _, k in mine] == [k for _, _, k in tar]
    check_resume(lambda: turbofeed.DataLoader(array_dataset(layout), batch_size=10, num_workers=2, shuffle=True,
                                              seed=7, transform=[T.RandomResizedCrop(24)], return_keys=True),
                 stops=[1])


def test_pipeline_samples_and_undecoded_arrays(fixed_images, array_dataset):
    """Pipeline yields the same keys/labels; without decoding, array samples carry the pixels."""
    pipe = turbofeed.Pipeline(array_dataset("npy"), num_workers=2, shuffle=True, seed=3)
    ref = turbofeed.Pipeline(fixed_images["tar_dir"], num_workers=2, shuffle=True, seed=3)
    mine, theirs = list(pipe), list(ref)
    assert [(s.key, s.label) for s in mine] == [(s.key, s.label) for s in theirs]
    for a, b in zip(mine[:5], theirs[:5]):
        np.testing.assert_array_equal(a.get_image(), b.get_image())
    raw = turbofeed.Pipeline(array_dataset("hdf5-pixels"), num_workers=1, decode_jpeg=False)
    first = raw.next_batch(1)[0]
    np.testing.assert_array_equal(first.data, fixed_images["pixels"][0])
    np.testing.assert_array_equal(first.get_image(), fixed_images["pixels"][0])
    raw.stop()


# -- detection and options ---------------------------------------------------------
def test_detection_by_extension_and_explicit_format(tmp_path, array_dataset):
    h5 = array_dataset("hdf5-pixels")
    assert resolve(h5) == [("hdf5", h5)]
    assert resolve(array_dataset("parquet")) == [("parquet", array_dataset("parquet"))]
    odd = str(tmp_path / "images.bin")
    shutil.copy(h5, odd)
    with pytest.raises(DatasetError, match="pass format="):
        resolve(odd)
    assert resolve(odd, format="hdf5") == [("hdf5", odd)]
    assert len(IndexedDataset(odd, format="hdf5")) == 48
    with pytest.raises(DatasetError, match="no .h5/.hdf5/.hdf/.he5 files in this folder"):
        resolve(str(tmp_path), format="hdf5")  # a folder: its files with that format's extensions
    with pytest.raises(ValueError, match="format must be one of"):
        IndexedDataset(h5, format="hdf")


def test_format_of_a_folder(tmp_path, fixed_images, array_dataset):
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(array_dataset("hdf5-pixels"), folder / "b.h5")
    shutil.copy(array_dataset("hdf5-jpeg"), folder / "a.hdf5")
    assert [os.path.basename(p) for _, p in resolve(str(folder))] == ["a.hdf5", "b.h5"]
    ds = turbofeed.io.IndexedDataset(str(folder))
    assert len(ds) == 96 and ds.read(0) == fixed_images["jpegs"][0]
    assert resolve(str(folder), format="folder") == [("folder", str(folder))]


def test_unknown_option_is_refused_before_opening(array_dataset):
    with pytest.raises(ValueError, match=r"unknown format_options \['image'\].*'images'"):
        IndexedDataset(array_dataset("parquet"), format_options={"image": "img"})
    with pytest.raises(ValueError, match="unknown format_options"):
        turbofeed.DataLoader(turbofeed.Dataset(array_dataset("parquet"), format_options={"label_column": "y"}))


@pytest.mark.parametrize("module,layout,extra", [
    ("h5py", "hdf5-pixels", "hdf5"), ("zarr", "zarr2-pixels", "zarr"), ("pyarrow", "parquet", "parquet"),
])
def test_missing_library_names_the_extra(module, layout, extra, array_dataset, monkeypatch):
    path = array_dataset(layout)
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(MissingExtra, match=rf"pip install 'turbofeed\[{extra}\]'") as info:
        IndexedDataset(path)
    assert path in str(info.value) and isinstance(info.value, ImportError)


def test_gpu_decode_path_takes_pixels_without_the_decoder(fixed_images, array_dataset):
    """With gpu_decode, pre-decoded samples skip the batch decoder (it only sees encoded
    bytes) and the batches match the CPU path (a CPU stand-in decoder; no GPU here)."""
    from turbofeed.decode import decode

    class StandIn:
        device = torch.device("cpu")
        seen: list[type] = []

        def decode(self, datas):
            self.seen.extend(type(d) for d in datas)
            return [torch.from_numpy(np.ascontiguousarray(decode(d).transpose(2, 0, 1))) for d in datas]

    data = [array_dataset("npy"), array_dataset("parquet")]
    kw = dict(batch_size=12, num_workers=2, shuffle=True, seed=1, transform=T.imagenet_train(24))
    decoder = StandIn()
    gpu = [(x.clone(), y.clone()) for x, y in turbofeed.DataLoader(data, gpu_decode=decoder, **kw)]
    cpu = [(x.clone(), y.clone()) for x, y in turbofeed.DataLoader(data, **kw)]
    assert set(decoder.seen) == {bytes} and len(decoder.seen) == 48  # the Parquet half only
    for (gx, gy), (cx, cy) in zip(gpu, cpu):
        assert torch.equal(gy, cy) and (gx.int() - cx.int()).abs().max() <= 1


def test_image_folder_with_a_stray_array_stays_an_image_folder(image_folder, tmp_path):
    folder = tmp_path / "imagefolder"
    shutil.copytree(image_folder, folder)
    np.save(folder / "mean.npy", np.zeros(3))
    assert resolve(str(folder)) == [("folder", str(folder))]
