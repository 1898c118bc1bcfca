"""Labels: unlabelled samples are delivered (-1), class ids are fixed by ``classes=[...]``,
integer and name labels never collide, and ids from the names present come with a warning."""

from __future__ import annotations

import json
import os

import pytest
from builders import small_jpeg, write_tar

import turbofeed
from turbofeed import transforms as T
from turbofeed.io import Dataset



def _named(path, names: list[str], ext: str = "txt") -> str:
    members = []
    for i, name in enumerate(names):
        members += [(f"{i:04d}.jpg", small_jpeg(i)), (f"{i:04d}.{ext}", name.encode())]
    return write_tar(path, members)


def test_laion_style_json_metadata_without_a_label_is_delivered_with_label_minus_one(tmp_path):
    """img2dataset writes KEY.jpg + KEY.json (url, caption, width, ...) and no label."""
    members = []
    for i in range(6):
        meta = {"url": f"http://x/{i}.jpg", "caption": "a photo", "key": f"{i:09d}", "status": "success",
                "width": 32, "height": 32}
        members += [(f"{i:09d}.jpg", small_jpeg(i)), (f"{i:09d}.json", json.dumps(meta).encode())]
    path = write_tar(tmp_path / "laion-00000.tar", members)
    loader = turbofeed.DataLoader(path, batch_size=3, transform=T.imagenet_eval(32))
    labels = [y for _, ys in loader for y in ys.tolist()]
    assert labels == [-1] * 6
    assert loader.stats.skipped_at_index == 0
    loader.close()


def test_explicit_classes_give_the_same_ids_to_train_and_val(tmp_path):
    train = _named(tmp_path / "train.tar", ["cat", "dog", "emu", "cat"])
    val = _named(tmp_path / "val.tar", ["emu", "dog"])  # no cat: sorted ids would shift
    classes = ["cat", "dog", "emu"]
    assert Dataset(train, classes=classes).labels.tolist() == [0, 1, 2, 0]
    assert Dataset(val, classes=classes).labels.tolist() == [2, 1]
    loader = turbofeed.DataLoader(val, batch_size=2, classes=classes, transform=T.imagenet_eval(32))
    assert loader.class_names == classes
    assert next(iter(loader))[1].tolist() == [2, 1]
    loader.close()


def test_ids_from_the_names_present_come_with_a_warning(tmp_path, caplog):
    val = _named(tmp_path / "val.tar", ["emu", "dog"])
    ds = Dataset(val)
    assert ds.class_names == ["dog", "emu"] and ds.labels.tolist() == [1, 0]
    assert any("classes=" in r.getMessage() and "2 class names found" in r.getMessage() for r in caplog.records)
    caplog.clear()
    Dataset(val, classes=["cat", "dog", "emu"])
    assert not any("class names found" in r.getMessage() for r in caplog.records)


def test_a_name_not_in_classes_is_an_error_naming_the_sample(tmp_path):
    path = _named(tmp_path / "s.tar", ["cat", "zebra"])
    with pytest.raises(turbofeed.DatasetError, match=r"'zebra' \(.*s.tar/0001\)"):
        Dataset(path, classes=["cat", "dog"])
    with pytest.raises(ValueError, match="more than once"):
        Dataset(path, classes=["cat", "cat"])
    with pytest.raises(TypeError, match="list of class names"):
        Dataset(path, classes="cat")


def test_integer_and_name_labels_never_collide(tmp_path):
    """``1.cls`` = 1 and ``dog.txt`` sorted to id 1 would be one class in the batch."""
    ints = _named(tmp_path / "a.tar", ["0", "1"], ext="cls")
    names = _named(tmp_path / "b.tar", ["cat", "dog"])
    with pytest.raises(turbofeed.DatasetError, match="mixes integer labels .* and class names"):
        Dataset([ints, names])
    ds = Dataset([ints, names], classes=["x", "y", "cat", "dog"])
    assert ds.labels.tolist() == [0, 1, 2, 3]


def _folder(root, classes: list[str], per_class: int = 2) -> str:
    for c in classes:
        os.makedirs(os.path.join(root, c), exist_ok=True)
        for i in range(per_class):
            with open(os.path.join(root, c, f"{i}.jpg"), "wb") as f:
                f.write(small_jpeg(i))
    return str(root)


def test_image_folder_keeps_class_names_and_takes_explicit_classes(tmp_path, caplog):
    train = _folder(tmp_path / "train", ["ant", "bee", "cow"])
    val = _folder(tmp_path / "val", ["bee", "cow"])
    loader = turbofeed.DataLoader(train, batch_size=2, transform=T.imagenet_eval(32))
    assert loader.class_names == ["ant", "bee", "cow"]
    assert any("3 class names found" in r.getMessage() for r in caplog.records)
    fixed = Dataset(val, classes=loader.class_names)
    assert fixed.labels.tolist() == [1, 1, 2, 2] and fixed.class_names == ["ant", "bee", "cow"]
    assert Dataset(val).labels.tolist() == [0, 0, 1, 1]  # what torchvision would give
    with pytest.raises(turbofeed.DatasetError, match="different class folders"):
        Dataset([train, val])
    with pytest.raises(turbofeed.DatasetError, match=r"not among the 2 classes given: \['ant'\]"):
        Dataset(train, classes=["bee", "cow"])
    loader.close()
