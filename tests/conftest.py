"""Fixtures: real JPEG shards and odd images, generated once per test session, offline."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import tiers
from builders import encode, photo, write_tar
from turbofeed._datagen import make_imagenet_like

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """Mark each test with its tiers (tests/tiers.py, one table): ``-m "not slow"`` and
    ``bash scripts/test.sh --fast`` select by them."""
    for item in items:
        try:
            relpath = item.path.resolve().relative_to(ROOT).as_posix()
        except ValueError:  # a test file outside this checkout (pytest's own tests of plugins)
            continue
        for tier in tiers.tiers_of(relpath, item.nodeid):
            item.add_marker(getattr(pytest.mark, tier))


def pytest_ignore_collect(collection_path, config):
    """Under ``-m``, a file or folder whose every test the expression deselects by its tiers
    is not imported at all (``--fast`` then skips collecting the slow files)."""
    expression = config.getoption("markexpr", "")
    if not expression:
        return None
    try:
        relpath = collection_path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    if collection_path.is_dir():
        relpath += "/"
    return True if tiers.leaves_out(relpath, expression) else None


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Tar indexes go to a per-session temp dir, never to the user's home."""
    monkeypatch.setenv("TURBOFEED_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tf-cache"))


@pytest.fixture(scope="session")
def shards(tmp_path_factory) -> str:
    """A folder of 3 WebDataset shards, 40 ImageNet-like JPEGs each (KEY.jpg + KEY.cls)."""
    out = tmp_path_factory.mktemp("shards")
    make_imagenet_like(str(out), count=120, per_shard=40, classes=10, seed=1, progress=False)
    return str(out)


@pytest.fixture(scope="session")
def shard_paths(shards) -> list[str]:
    return sorted(os.path.join(shards, n) for n in os.listdir(shards) if n.endswith(".tar"))


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> str:
    """An ImageFolder tree of 30 JPEGs in class sub-folders."""
    out = tmp_path_factory.mktemp("folder")
    make_imagenet_like(str(out), count=30, classes=4, seed=2, layout="folder", progress=False)
    return str(out)


@pytest.fixture(scope="session")
def odd_images() -> dict[str, bytes]:
    """Encoded images of every kind the decoder must handle or refuse."""
    base = photo()
    good = encode(base, quality=90)
    return {
        "rgb": good,
        "gray": encode(base.convert("L"), quality=90),
        "cmyk": encode(base.convert("CMYK"), quality=90),
        "progressive": encode(base, quality=90, progressive=True),
        "png_rgba": encode(base.convert("RGBA"), "PNG"),
        "png_palette": encode(base.convert("P"), "PNG"),
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "garbage": b"this is not an image" * 20,
    }


@pytest.fixture
def tar_writer():
    return write_tar


@pytest.fixture(scope="session")
def fixed_images(tmp_path_factory) -> dict:
    """48 same-size (40 x 56) JPEGs and their decoded pixels, labels ``i % 5``, keys
    ``f"{i:08d}"``, and the same samples as two tar shards (``tar_dir``): the reference
    for the HDF5, Zarr, .npy and Parquet sources, which store these bytes or pixels."""
    from turbofeed.decode import decode
    from turbofeed.io.local.writer import ShardWriter

    count = 48
    jpegs = [encode(photo(40, 56, seed=i), quality=90) for i in range(count)]
    labels = [i % 5 for i in range(count)]
    keys = [f"{i:08d}" for i in range(count)]
    out = tmp_path_factory.mktemp("fixed-tar")
    with ShardWriter(str(out / "shard-%06d.tar"), per_shard=24) as writer:
        for key, jpg, label in zip(keys, jpegs, labels):
            writer.write(key, {"jpg": jpg, "cls": str(label).encode()})
    return {"jpegs": jpegs, "pixels": np.stack([decode(j) for j in jpegs]), "labels": labels,
            "keys": keys, "tar_dir": str(out)}


@pytest.fixture(scope="session")
def array_dataset(fixed_images, tmp_path_factory):
    """``build(layout) -> path``: the ``fixed_images`` samples stored in one layout, written
    with the storage library itself (h5py, zarr, numpy, pyarrow) the way users write them.

    Layouts: ``hdf5-pixels`` (contiguous), ``hdf5-gzip`` (chunks of 8, gzip),
    ``hdf5-jpeg`` (vlen bytes), ``zarr2-pixels``, ``zarr3-pixels`` (chunks of 8),
    ``zarr3-jpeg``, ``npy`` (images.npy + labels.npy + keys.npy), ``parquet`` (Hugging
    Face ``{bytes, path}`` struct, row groups of 10). Built once per session.
    """
    built: dict[str, str] = {}
    root = tmp_path_factory.mktemp("arrays")
    pixels, jpegs = fixed_images["pixels"], fixed_images["jpegs"]
    labels = np.array(fixed_images["labels"], dtype=np.int64)

    def build(layout: str) -> str:
        if layout in built:
            return built[layout]
        if layout.startswith("hdf5"):
            h5py = pytest.importorskip("h5py")
            path = str(root / f"{layout}.h5")
            with h5py.File(path, "w") as f:
                if layout == "hdf5-pixels":
                    f.create_dataset("images", data=pixels)
                elif layout == "hdf5-gzip":
                    f.create_dataset("images", data=pixels, chunks=(8, *pixels.shape[1:]), compression="gzip")
                else:
                    ds = f.create_dataset("images", (len(jpegs),), dtype=h5py.vlen_dtype(np.uint8))
                    for i, jpg in enumerate(jpegs):
                        ds[i] = np.frombuffer(jpg, np.uint8)
                f.create_dataset("labels", data=labels)
        elif layout.startswith("zarr"):
            zarr = pytest.importorskip("zarr")
            version = int(layout[4])
            path = str(root / f"{layout}.zarr")
            group = zarr.open_group(path, mode="w", zarr_format=version)
            if layout.endswith("jpeg"):
                from zarr.core.dtype import VariableLengthBytes

                arr = group.create_array("images", shape=(len(jpegs),), chunks=(8,), dtype=VariableLengthBytes())
                arr[:] = np.array(jpegs, dtype=object)
            else:
                arr = group.create_array("images", shape=pixels.shape, chunks=(8, *pixels.shape[1:]),
                                         dtype="uint8")
                arr[:] = pixels
            group.create_array("labels", shape=labels.shape, dtype="int64")[:] = labels
        elif layout == "npy":
            path = str(root / "npy")
            os.makedirs(path)
            np.save(os.path.join(path, "images.npy"), pixels)
            np.save(os.path.join(path, "labels.npy"), labels)
            np.save(os.path.join(path, "keys.npy"), np.array(fixed_images["keys"]))
        elif layout == "parquet":
            pa = pytest.importorskip("pyarrow")
            pq = pytest.importorskip("pyarrow.parquet")
            path = str(root / "train-00000-of-00001.parquet")
            images = [{"bytes": jpg, "path": f"{i:08d}.jpg"} for i, jpg in enumerate(jpegs)]
            table = pa.table({"image": images, "label": labels})
            pq.write_table(table, path, row_group_size=10)
        else:
            raise ValueError(layout)
        built[layout] = path
        return path

    return build


@pytest.fixture
def per_shard(monkeypatch):
    """In this test, ``index=False`` indexes every local tar shard on its own: the per-shard
    path (kept for compressed shards, ``s3://`` shards without an index and shards changed
    during a pass), which the dataset index must equal sample for sample. It has no public
    switch any more (``index=False`` builds the dataset index in memory), so the test makes
    that in-memory build find nothing to build, as for data without local tar shards."""
    import turbofeed.io.dataset as dataset_module  # noqa: PLC0415: only where asked

    monkeypatch.setattr(dataset_module, "memory_index", lambda *args, **kwargs: None)
