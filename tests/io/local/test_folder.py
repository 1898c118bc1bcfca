"""io.local.folder: ImageFolder trees get torchvision's labels (sorted class folder index), keys
without extensions, and byte-exact reads."""

from __future__ import annotations

import os

import pytest

from turbofeed.errors import DatasetError
from turbofeed.io import IndexedDataset, FolderSource

_TV_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _torchvision_samples(root: str) -> list[tuple[str, int]]:
    """torchvision.datasets.ImageFolder's (relative path, class index), written out from its
    documented algorithm: sorted class folders, then sorted os.walk of each class."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for index, cls in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
            for name in sorted(files):
                if name.lower().endswith(_TV_EXTENSIONS):
                    out.append((os.path.relpath(os.path.join(dirpath, name), root), index))
    return out


def test_labels_and_order_match_torchvision(image_folder):
    src = FolderSource(image_folder)
    expected = _torchvision_samples(image_folder)
    assert len(src.table) == len(expected) == 30
    assert list(zip(src.table.image_names, src.table.labels)) == expected
    assert src.classes == sorted(os.listdir(image_folder))
    assert src.table.keys == [name.rsplit(".", 1)[0] for name, _ in expected]


def test_reads_are_the_file_bytes(image_folder):
    src = FolderSource(image_folder)
    for i in (0, 13, len(src.table) - 1):
        with open(os.path.join(image_folder, src.table.image_names[i]), "rb") as f:
            assert src.read(i) == f.read()


def test_nested_files_empty_class_and_non_images(tmp_path, odd_images):
    """An empty class folder still takes its index (as torchvision's class_to_idx does);
    images in sub-folders belong to their class; other files are ignored."""
    jpg, png = odd_images["rgb"], odd_images["png_palette"]
    for rel, data in [("ant/a.jpg", jpg), ("ant/deep/b.JPEG", jpg), ("cat/c.png", png),
                      ("cat/notes.txt", b"x"), ("cat/.hidden.jpg", jpg)]:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (tmp_path / "bee").mkdir()
    src = FolderSource(str(tmp_path))
    assert src.classes == ["ant", "bee", "cat"]
    assert src.table.keys == ["ant/a", "ant/deep/b", "cat/c"]
    assert src.table.labels == [0, 0, 2]
    assert src.read(2) == png


def test_flat_folder_has_no_labels(tmp_path, odd_images):
    for name in ("b.jpg", "a.png", "readme.md"):
        (tmp_path / name).write_bytes(odd_images["rgb"])
    src = FolderSource(str(tmp_path))
    assert src.table.keys == ["a", "b"] and src.table.labels == [None, None]
    assert IndexedDataset(str(tmp_path)).labels.tolist() == [-1, -1]


def test_empty_folder_is_an_error(tmp_path):
    with pytest.raises(DatasetError, match="no images found") as info:
        FolderSource(str(tmp_path))
    assert str(tmp_path) in str(info.value)
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "notes.txt").write_text("no images here")
    with pytest.raises(DatasetError, match="no images found"):
        FolderSource(str(tmp_path))


def test_dataset_over_a_folder_keeps_the_labels(image_folder):
    ds = IndexedDataset(image_folder)
    assert ds.labels.tolist() == [label for _, label in _torchvision_samples(image_folder)]
