"""``turbofeed convert``: ImageFolder/Parquet -> tar shards and tar -> fixed-size .npy keep
bytes, keys, labels and order; an interrupted run leaves nothing under a final name and
a rerun continues where it stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from turbofeed import _convert
from turbofeed._convert import to_npy, to_tar
from turbofeed.errors import DatasetError
from turbofeed.io import IndexedDataset, FolderSource, NpySource, TarSource, split_key


def _tar_samples(folder: str) -> list[tuple[str, dict[str, bytes]]]:
    """(key, {ext: payload}) of every sample of the shards in ``folder``, read with tarfile."""
    out: dict[str, dict[str, bytes]] = {}
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".tar")):
        with tarfile.open(os.path.join(folder, name)) as tf:
            for m in tf.getmembers():
                key, ext = split_key(m.name)
                out.setdefault(key, {})[ext] = tf.extractfile(m).read()
    return list(out.items())


def test_image_folder_to_tar(image_folder, tmp_path):
    dst = str(tmp_path / "shards")
    shards = to_tar(image_folder, dst, per_shard=8, progress=False)
    assert [os.path.basename(s) for s in shards] == [f"shard-{k:06d}.tar" for k in range(4)]
    folder = FolderSource(image_folder)
    samples = _tar_samples(dst)
    assert [key for key, _ in samples] == folder.table.keys  # same keys, same order
    for i, (key, members) in enumerate(samples):
        assert members["jpg"] == folder.read(i) and "cls" not in members
        assert json.loads(members["json"]) == {"label": folder.classes[folder.table.labels[i]]}
    index = json.load(open(os.path.join(dst, "index.json")))
    assert [s["nsamples"] for s in index["shardlist"]] == [8, 8, 8, 6]
    assert IndexedDataset(dst).labels.tolist() == IndexedDataset(image_folder).labels.tolist()


def test_image_folder_class_names_survive_conversion(image_folder, tmp_path):
    """Issue 37 #9: the folder names became bare .cls ids, and the converted dataset had
    no class_names (docs/formats.md promises .json {"label": "cat"})."""
    dst = str(tmp_path / "named")
    to_tar(image_folder, dst, per_shard=8, progress=False)
    before, after = IndexedDataset(image_folder), IndexedDataset(dst)
    assert before.class_names and after.class_names == before.class_names
    assert [after.class_names[k] for k in after.labels] == [before.class_names[k] for k in before.labels]


def test_parquet_to_tar_keys_are_row_numbers(fixed_images, array_dataset, tmp_path):
    """Row r of the table becomes tar key f"{r:08d}": the keys of the tar it came from."""
    dst = str(tmp_path / "from-parquet")
    to_tar(array_dataset("parquet"), dst, per_shard=20, progress=False)
    samples = _tar_samples(dst)
    assert [key for key, _ in samples] == fixed_images["keys"]
    assert [m["jpg"] for _, m in samples] == fixed_images["jpegs"]
    assert [int(m["cls"]) for _, m in samples] == fixed_images["labels"]


def test_class_names_survive_as_json_labels(tmp_path, fixed_images):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    src = str(tmp_path / "names.parquet")
    pq.write_table(pa.table({"image": fixed_images["jpegs"][:3], "label": ["dog", "cat", "dog"],
                             "key": ["a.b/c.d", "x", "y"]}), src)
    dst = str(tmp_path / "out")
    to_tar(src, dst, progress=False)
    samples = dict(_tar_samples(dst))
    assert set(samples) == {"a.b/c_d", "x", "y"}  # a dot in the name would split key from extension
    assert json.loads(samples["x"]["json"]) == {"label": "cat"}  # a .txt name would read as a caption
    assert IndexedDataset(dst).class_names == ["cat", "dog"]


def test_pixels_cannot_become_tar_members(array_dataset, tmp_path):
    pytest.importorskip("h5py")
    with pytest.raises(DatasetError, match="decoded pixels.*--to npy"):
        to_tar(array_dataset("hdf5-pixels"), str(tmp_path / "x"), progress=False)
    assert not any(n.endswith((".tar", ".tmp")) for n in os.listdir(tmp_path / "x"))


def test_tar_to_npy_rows_match_tar_keys_and_pixels(fixed_images, tmp_path):
    """Row r of images.npy is tar sample r (keys.npy says so), resized and centre-cropped
    exactly as the loader's Resize + CenterCrop does it."""
    import turbofeed
    from turbofeed import transforms as T

    dst = str(tmp_path / "npy")
    path = to_npy(fixed_images["tar_dir"], dst, size=32, workers=2, progress=False)
    images = np.load(path, mmap_mode="r")
    assert images.shape == (48, 32, 32, 3) and images.dtype == np.uint8
    keys, labels = np.load(os.path.join(dst, "keys.npy")), np.load(os.path.join(dst, "labels.npy"))
    assert keys.tolist() == fixed_images["keys"] and labels.tolist() == fixed_images["labels"]
    pipe = turbofeed.Pipeline(fixed_images["tar_dir"], num_workers=2, transform=[T.Resize(32), T.CenterCrop(32)])
    for row, sample in enumerate(pipe):
        assert sample.key == keys[row]
        np.testing.assert_array_equal(images[row], sample.get_image())
    src = NpySource(path)
    assert src.table.keys == fixed_images["keys"]  # the loader sees the tar's keys
    assert to_npy(fixed_images["tar_dir"], dst, size=32, progress=False) == path  # complete: nothing to do


def test_unreadable_samples_are_left_out(tmp_path, fixed_images, tar_writer, odd_images):
    src = tar_writer(str(tmp_path / "bad.tar"), [
        ("a.jpg", fixed_images["jpegs"][0]), ("a.cls", b"1"),
        ("b.jpg", odd_images["truncated"]), ("b.cls", b"2"),
        ("c.jpg", fixed_images["jpegs"][2]), ("c.cls", b"3"),
    ])
    dst = str(tmp_path / "npy")
    to_npy(src, dst, size=16, progress=False)
    assert np.load(os.path.join(dst, "images.npy")).shape == (2, 16, 16, 3)  # header rewritten to 2 rows
    assert np.load(os.path.join(dst, "keys.npy")).tolist() == ["a", "c"]
    assert np.load(os.path.join(dst, "labels.npy")).tolist() == [1, 3]
    assert json.load(open(os.path.join(dst, _convert.MANIFEST)))["left_out"] == ["bad.tar/b"]


class _Stop(BaseException):
    """Stands for a kill or Ctrl-C: not a bad sample, it ends the run."""


def _reads_until(monkeypatch, cls, stop_after: int | None) -> list[str]:
    """Patch ``cls.read`` to record the keys read and stop the run after ``stop_after`` reads."""
    seen: list[str] = []
    original = cls.read

    def read(self, i):
        if stop_after is not None and len(seen) == stop_after:
            raise _Stop()
        seen.append(self.table.keys[i])
        return original(self, i)
    monkeypatch.setattr(cls, "read", read)
    return seen


def test_interrupted_tar_conversion_resumes(fixed_images, tmp_path, monkeypatch):
    """Killed in shard 2: shards 0-1 are published, no partial shard is visible; the rerun
    writes shards 2-4 only and reads none of the samples of the finished shards."""
    src, dst = fixed_images["tar_dir"], str(tmp_path / "out")
    _reads_until(monkeypatch, TarSource, 25)
    with pytest.raises(_Stop):
        to_tar(src, dst, per_shard=10, progress=False)
    assert sorted(os.listdir(dst)) == [_convert.MANIFEST, "shard-000000.tar", "shard-000001.tar"]
    monkeypatch.undo()
    seen = _reads_until(monkeypatch, TarSource, None)
    to_tar(src, dst, per_shard=10, progress=False)
    assert seen == fixed_images["keys"][20:]
    assert [key for key, _ in _tar_samples(dst)] == fixed_images["keys"]
    with pytest.raises(DatasetError, match="another per_shard"):
        to_tar(src, dst, per_shard=12, progress=False)


def test_interrupted_npy_conversion_resumes(fixed_images, tmp_path, monkeypatch):
    src, dst = fixed_images["tar_dir"], str(tmp_path / "npy")
    reference = to_npy(src, str(tmp_path / "clean"), size=24, progress=False)
    _reads_until(monkeypatch, TarSource, 19)
    with pytest.raises(_Stop):
        to_npy(src, dst, size=24, chunk=8, workers=1, progress=False)
    assert not os.path.exists(os.path.join(dst, "images.npy"))  # only .tmp files so far
    state = json.load(open(os.path.join(dst, _convert.MANIFEST)))
    assert state["next"] == 16 and not state.get("complete")
    monkeypatch.undo()
    seen = _reads_until(monkeypatch, TarSource, None)
    to_npy(src, dst, size=24, chunk=8, workers=1, progress=False)
    assert seen == fixed_images["keys"][16:]
    np.testing.assert_array_equal(np.load(os.path.join(dst, "images.npy")), np.load(reference))
    assert sorted(os.listdir(dst)) == [_convert.MANIFEST, "images.npy", "keys.npy", "labels.npy"]


def test_foreign_output_folder_is_refused(fixed_images, tmp_path):
    (tmp_path / "shard-000000.tar").write_bytes(b"")
    with pytest.raises(DatasetError, match="not written by `turbofeed convert`"):
        to_tar(fixed_images["tar_dir"], str(tmp_path), progress=False)


def test_cli_convert(array_dataset, tmp_path):
    pytest.importorskip("pyarrow")
    run = [sys.executable, "-m", "turbofeed.cli", "convert"]
    shards = str(tmp_path / "shards")
    done = subprocess.run([*run, array_dataset("parquet"), shards, "--to", "tar", "--per-shard", "16",
                           "-o", "labels=label"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "3 shards" in done.stdout
    npy = str(tmp_path / "npy")
    done = subprocess.run([*run, shards, npy, "--to", "npy", "--size", "20", "--workers", "2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "48 images of 20x20" in done.stdout
    done = subprocess.run([*run, array_dataset("parquet"), str(tmp_path / "x"), "--to", "tar", "-o", "img=x"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "unknown format_options ['img']" in done.stderr
