"""io.source and io.registry: the Source contract (required members, declared capabilities
with their defaults) and the one registry every source is opened through."""

from __future__ import annotations

import numpy as np

from turbofeed.io import FORMATS, IndexedDataset, FolderSource, NpySource, SampleTable, Source, TarSource
from turbofeed.io.registry import KINDS, Opener


class Minimal(Source):
    """A source with only the required members."""

    def __init__(self) -> None:
        self.path = "minimal"
        self.table = SampleTable(keys=["a", "b"], image_names=["a.jpg", "b.jpg"], labels=[1, None])

    def read(self, i: int) -> bytes:
        return self.table.keys[i].encode()

    def close(self) -> None:
        pass


def test_a_source_with_only_the_required_members_gets_every_capability():
    src = Minimal()
    assert isinstance(src, Source)
    assert src.view(1) == b"b"  # read() when no view is declared
    assert src.damage is None and src.file is None and src.classes is None
    assert src.changed() is False and src.io_stats() == {}
    assert src.member_exts(0) == ("jpg",) and src.read_member(0, "jpg") == b"a"  # the image alone
    assert src.read_member(0, "txt") is None and not src.table.has_members


def test_built_in_sources_declare_their_capabilities(shard_paths, image_folder, fixed_images, tmp_path,
                                                    monkeypatch):
    tar = TarSource(shard_paths[0], cache_dir=str(tmp_path))
    assert tar.view(0) == tar.read(0)  # plain reads by default
    monkeypatch.setenv("TURBOFEED_MMAP", "1")
    mapped = TarSource(shard_paths[0], cache_dir=str(tmp_path))
    assert isinstance(mapped.view(0), memoryview) and bytes(mapped.view(0)) == tar.read(0)
    assert tar.damage is None and tar.file is not None and not tar.changed()
    folder = FolderSource(image_folder)
    assert folder.classes and folder.file is None and not folder.changed()
    path = tmp_path / "images.npy"
    np.save(path, fixed_images["pixels"])
    npy = NpySource(str(path))
    assert npy.file is not None and not npy.changed() and npy.io_stats() == {"read_mode": "mmap"}
    assert npy.member_exts(0) == ("",) and np.array_equal(npy.read_member(0, ""), npy.read(0))  # rows: pixels
    assert tar.member_exts(0) == ("jpg", "cls") and tar.read_member(0, "jpg") == tar.read(0)
    np.save(path, fixed_images["pixels"][:2])  # a new file at the same path
    assert npy.changed()


def test_every_format_is_opened_through_its_registry_entry(shard_paths, tmp_path):
    assert FORMATS == ("tar", "folder", "hdf5", "zarr", "npy", "parquet", "tfrecord")
    assert set(KINDS) == {*FORMATS, "s3"}
    opener = Opener([("tar", shard_paths[0])], cache_dir=str(tmp_path))
    assert opener.shards is None  # no s3:// paths: no client, cache or prefetch threads
    src = opener.open("tar", shard_paths[0])
    assert isinstance(src, TarSource) and len(src.table) == 40
    ds = IndexedDataset(shard_paths[0], cache_dir=str(tmp_path))
    assert ds.view(3) == src.view(3) and ds.damaged == []
