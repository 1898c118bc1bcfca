"""Labels: unlabelled samples are delivered (-1), class ids are fixed by ``classes=[...]``,
integer and name labels never collide, and ids from the names present come with a warning."""

from __future__ import annotations

import json
import os

import pytest
from builders import small_jpeg, write_tar

import turbofeed
from turbofeed import transforms as T
from turbofeed.io import IndexedDataset



def _named(path, names: list[str], ext: str = "txt") -> str:
    """A shard of one jpg and one label member per name (``json``: ``{"label": name}``)."""
    members = []
    for i, name in enumerate(names):
        payload = json.dumps({"label": name}) if ext == "json" else name
        members += [(f"{i:04d}.jpg", small_jpeg(i)), (f"{i:04d}.{ext}", payload.encode())]
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
    assert IndexedDataset(train, classes=classes).labels.tolist() == [0, 1, 2, 0]
    assert IndexedDataset(val, classes=classes).labels.tolist() == [2, 1]
    loader = turbofeed.DataLoader(turbofeed.Dataset(val, classes=classes), batch_size=2, transform=T.imagenet_eval(32))
    assert loader.class_names == classes
    assert next(iter(loader))[1].tolist() == [2, 1]
    loader.close()


def test_ids_from_the_names_present_come_with_a_warning(tmp_path, caplog):
    val = _named(tmp_path / "val.tar", ["emu", "dog"], ext="json")
    ds = IndexedDataset(val)
    assert ds.class_names == ["dog", "emu"] and ds.labels.tolist() == [1, 0]
    assert any("classes=" in r.getMessage() and "2 class names found" in r.getMessage() for r in caplog.records)
    caplog.clear()
    IndexedDataset(val, classes=["cat", "dog", "emu"])
    assert not any("class names found" in r.getMessage() for r in caplog.records)


def test_a_name_not_in_classes_is_an_error_naming_the_sample(tmp_path):
    path = _named(tmp_path / "s.tar", ["cat", "zebra"])
    with pytest.raises(turbofeed.DatasetError, match=r"'zebra' \(.*s.tar/0001\)"):
        IndexedDataset(path, classes=["cat", "dog"])
    with pytest.raises(ValueError, match="more than once"):
        IndexedDataset(path, classes=["cat", "cat"])
    with pytest.raises(TypeError, match="list of class names"):
        IndexedDataset(path, classes="cat")


def test_integer_and_name_labels_never_collide(tmp_path):
    """``1.cls`` = 1 and a JSON ``"dog"`` sorted to id 1 would be one class in the batch."""
    ints = _named(tmp_path / "a.tar", ["0", "1"], ext="cls")
    names = _named(tmp_path / "b.tar", ["cat", "dog"], ext="json")
    with pytest.raises(turbofeed.DatasetError, match="mixes integer labels .* and class names"):
        IndexedDataset([ints, names])
    ds = IndexedDataset([ints, names], classes=["x", "y", "cat", "dog"])
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
    fixed = IndexedDataset(val, classes=loader.class_names)
    assert fixed.labels.tolist() == [1, 1, 2, 2] and fixed.class_names == ["ant", "bee", "cow"]
    assert IndexedDataset(val).labels.tolist() == [0, 0, 1, 1]  # what torchvision would give
    with pytest.raises(turbofeed.DatasetError, match="different class folders"):
        IndexedDataset([train, val])
    with pytest.raises(turbofeed.DatasetError, match=r"not among the 2 classes given: \['ant'\]"):
        IndexedDataset(train, classes=["bee", "cow"])
    loader.close()


@pytest.mark.parametrize("label,ok", [("0", True), ("2", True), ("3", False), ("-1", False), ("7", False)])
def test_an_integer_label_must_be_an_id_of_the_classes_given(tmp_path, label, ok):
    """With ``classes`` of 3 names the integer ids are 0, 1 and 2: ``len(classes)`` and a
    negative integer are named as not among them, never taken as a class or as "no label"."""
    path = _named(tmp_path / "s.tar", ["1", label], ext="cls")
    if ok:
        assert IndexedDataset(path, classes=["a", "b", "c"]).labels.tolist() == [1, int(label)]
    else:
        with pytest.raises(turbofeed.DatasetError,
                           match=rf"not among the 3 classes given: integer label {label} \(.*s\.tar/0001\)"):
            IndexedDataset(path, classes=["a", "b", "c"])


@pytest.mark.parametrize("folder_first", [True, False], ids=["folder-then-shard", "shard-then-folder"])
def test_an_image_folder_beside_integer_labels_names_both(tmp_path, folder_first):
    """An ImageFolder tree's ids are positions in its class folders' names: beside a shard
    of integer labels they would collide. The error names the integer shard's first sample
    as the integers and the tree as the class names, whichever comes first."""
    tree = _folder(tmp_path / "train", ["ant", "bee"])
    ints = _named(tmp_path / "ints.tar", ["1", "0"], ext="cls")
    sources = [tree, ints] if folder_first else [ints, tree]
    with pytest.raises(turbofeed.DatasetError) as info:
        IndexedDataset(sources)
    message = str(info.value)
    assert f"integer labels (1 in {ints}/0000)" in message, message
    assert f"class names (class folders of {tree})" in message, message
    assert IndexedDataset(sources, classes=["ant", "bee"]).labels.tolist() == \
        ([0, 0, 1, 1, 1, 0] if folder_first else [1, 0, 0, 0, 1, 1])


@pytest.mark.parametrize("folder_first", [True, False], ids=["folder-then-shard", "shard-then-folder"])
def test_an_image_folder_beside_named_labels_numbers_them_by_its_folders(tmp_path, folder_first, caplog):
    """Names that are the tree's class folders take the tree's ids; a name the tree lacks
    is an error naming that sample and the tree (not the first name, which it has)."""
    tree = _folder(tmp_path / "train", ["ant", "bee", "cow"])
    names = _named(tmp_path / "names.tar", ["cow", "ant"])
    sources = [tree, names] if folder_first else [names, tree]
    ds = IndexedDataset(sources)
    assert ds.class_names == ["ant", "bee", "cow"]
    assert ds.labels.tolist() == ([0, 0, 1, 1, 2, 2, 2, 0] if folder_first else [2, 0, 0, 0, 1, 1, 2, 2])
    stray = _named(tmp_path / "stray.tar", ["bee", "emu", "yak"])
    with pytest.raises(turbofeed.DatasetError) as info:
        IndexedDataset([tree, stray] if folder_first else [stray, tree])
    message = str(info.value)
    assert f"class names ('emu' in {stray}/0001) are not among the class folders of {tree}" in message, message
    assert "integer labels" not in message and "'bee'" not in message and "'yak'" not in message, message


def test_names_that_are_every_class_folder_take_the_trees_ids(tmp_path):
    tree = _folder(tmp_path / "train", ["ant", "bee"], per_class=1)
    names = _named(tmp_path / "names.tar", ["bee", "ant"])
    assert IndexedDataset([tree, names]).labels.tolist() == [0, 1, 1, 0]


def test_errors_name_at_most_five_bad_labels_and_three_roots(tmp_path):
    """Across shards, the first five labels not among ``classes`` (not all of them);
    ImageFolder roots that disagree: the first three."""
    a = _named(tmp_path / "a.tar", ["7", "8", "0", "9"], ext="cls")
    b = _named(tmp_path / "b.tar", ["5", "6", "4", "3"], ext="cls")
    with pytest.raises(turbofeed.DatasetError) as info:
        IndexedDataset([a, b], classes=["x", "y"])
    message = str(info.value)
    assert message.count("integer label") == 5, message
    assert "integer label 7" in message and "integer label 6" in message and "integer label 4" not in message
    trees = [_folder(tmp_path / f"t{i}", [f"c{j}" for j in range(i + 1)], per_class=1) for i in range(4)]
    with pytest.raises(turbofeed.DatasetError, match="different class folders") as info:
        IndexedDataset(trees)
    assert all(f"{t}: " in str(info.value) for t in trees[:3]) and f"{trees[3]}: " not in str(info.value)


def test_five_bad_labels_are_named_when_the_first_shard_holds_four(tmp_path):
    """The count of bad labels reaching exactly four after a shard does not stop the search:
    the fifth comes from the next shard."""
    a = _named(tmp_path / "a.tar", ["7", "8", "9", "6"], ext="cls")
    b = _named(tmp_path / "b.tar", ["0", "5", "4"], ext="cls")
    with pytest.raises(turbofeed.DatasetError) as info:
        IndexedDataset([a, b], classes=["x", "y"])
    message = str(info.value)
    assert message.count("integer label") == 5 and "integer label 5" in message, message
    assert "integer label 4" not in message
