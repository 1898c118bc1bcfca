"""io.arrays.parquet: image tables as Hugging Face exports them (``{bytes, path}`` struct + label),
plain binary columns, row groups loaded once per epoch, and clear errors."""

from __future__ import annotations

import logging

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from turbofeed.errors import DatasetError  # noqa: E402
from turbofeed.io import IndexedDataset, ParquetSource, resolve  # noqa: E402
from turbofeed.io.arrays.blocks import BLOCKS  # noqa: E402


def test_hugging_face_layout(fixed_images, array_dataset):
    """Bytes come back unchanged; each row group's image column is read once in a shuffled pass."""
    src = ParquetSource(array_dataset("parquet"))
    assert src.images_name == "image" and src.table.labels == fixed_images["labels"]
    assert src.table.keys == fixed_images["keys"]
    for i in np.random.default_rng(3).permutation(48):
        assert src.read(int(i)) == fixed_images["jpegs"][i]
    stats = src.io_stats()
    assert stats["blocks"] == 5 and stats["block_loads"] == 5 and stats["block_hits"] == 43
    src.close()


def test_binary_column_custom_names_and_keys(tmp_path, fixed_images):
    path = str(tmp_path / "custom.parquet")
    jpegs = fixed_images["jpegs"][:4]
    pq.write_table(pa.table({"jpg_bytes": pa.array(jpegs, pa.large_binary()), "y": ["b", "a", "b", "c"],
                             "__key__": ["k0", "k1", "k2", "k3"]}), path)
    with pytest.raises(DatasetError) as info:
        ParquetSource(path)
    assert "jpg_bytes: large_binary" in str(info.value) and "format_options" in str(info.value)
    src = ParquetSource(path, {"images": "jpg_bytes", "labels": "y"})
    assert [src.read(i) for i in range(4)] == jpegs and src.table.keys == ["k0", "k1", "k2", "k3"]
    ds = IndexedDataset(path, format_options={"images": "jpg_bytes", "labels": "y"})
    assert ds.class_names == ["a", "b", "c"] and ds.labels.tolist() == [1, 0, 1, 2]


def test_folder_of_parquet_files_is_a_file_list(tmp_path, fixed_images):
    jpegs = fixed_images["jpegs"]
    for k in range(2):
        rows = range(k * 5, k * 5 + 5)
        pq.write_table(pa.table({"img": [jpegs[i] for i in rows], "label": list(rows)}),
                       str(tmp_path / f"train-{k:05d}-of-00002.parquet"))
    assert [kind for kind, _ in resolve(str(tmp_path))] == ["parquet", "parquet"]
    ds = IndexedDataset(str(tmp_path))
    assert ds.labels.tolist() == list(range(10)) and ds.read(7) == jpegs[7]


def test_one_big_row_group_warns(tmp_path, fixed_images, monkeypatch, caplog):
    path = str(tmp_path / "big.parquet")
    pq.write_table(pa.table({"image": fixed_images["jpegs"]}), path)  # one row group of 48
    monkeypatch.setattr(BLOCKS, "budget", 10_000)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        src = ParquetSource(path)
    assert "blocks of 48 samples" in caplog.text
    assert src.read(3) == fixed_images["jpegs"][3]  # still correct, only slower


# -- errors --------------------------------------------------------------------------
def test_not_parquet(tmp_path):
    path = tmp_path / "fake.parquet"
    path.write_bytes(b"not parquet" * 100)
    with pytest.raises(DatasetError, match="not a readable Parquet file") as info:
        IndexedDataset(str(path))
    assert str(path) in str(info.value)


def test_image_column_of_the_wrong_type_and_missing_label(tmp_path):
    path = str(tmp_path / "ints.parquet")
    pq.write_table(pa.table({"image": [1, 2, 3], "label": [0, 1, 2]}), path)
    with pytest.raises(DatasetError, match="image column 'image' is int64"):
        ParquetSource(path)
    path = str(tmp_path / "ok.parquet")
    pq.write_table(pa.table({"image": [b"\xff\xd8\xff"], "label": [0]}), path)
    with pytest.raises(DatasetError, match="no label column 'target'.*'image: binary', 'label: int64'"):
        ParquetSource(path, {"labels": "target"})


def test_null_image_is_a_sample_error(tmp_path, fixed_images):
    """Rows whose image is null (or whose bytes are null, with only a path) fail alone."""
    pytest.importorskip("torch")
    import turbofeed
    from turbofeed import transforms as T

    path = str(tmp_path / "nulls.parquet")
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    images = [{"bytes": fixed_images["jpegs"][0], "path": "a.jpg"}, {"bytes": None, "path": "b.jpg"}, None,
              {"bytes": fixed_images["jpegs"][3], "path": "d.jpg"}]
    pq.write_table(pa.table({"image": pa.array(images, struct), "label": [0, 1, 2, 3]}), path)
    src = ParquetSource(path)
    assert src.read(3) == fixed_images["jpegs"][3]
    for i in (1, 2):
        with pytest.raises(ValueError, match="null"):
            src.read(i)
    loader = turbofeed.DataLoader(path, batch_size=4, num_workers=2, transform=[T.CenterCrop(16)],
                                  on_error="skip", return_keys=True)
    (images, labels, keys), = list(loader)
    assert labels.tolist() == [0, 3] and keys == ["nulls.parquet/00000000", "nulls.parquet/00000003"]
    assert loader.stats.as_dict()["errors"]["fetch"] == 2
