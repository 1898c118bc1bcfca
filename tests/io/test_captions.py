"""Captions are not class ids: on CLIP/LAION-style shards (``jpg`` + ``txt``) written by the
real ``webdataset`` library, a loader without ``fields=`` and without ``classes=`` gives
every sample label -1 and warns once, showing the ``fields=`` line that loads the
captions. A ``.txt`` holding an integer, ``.cls`` and JSON labels stay labels."""

from __future__ import annotations

import json
import logging

import pytest
from builders import small_jpeg

import turbofeed
from turbofeed import transforms as T
from turbofeed.io import IndexedDataset, build_index

webdataset = pytest.importorskip("webdataset")

CAPTIONS = ["a dog running on the beach", "two cats, asleep", "Tokyo at night", "dog",
            "a red bicycle", "cat", "an empty room with a chair", "sunset"]


def _write(path, samples: list[dict]) -> str:
    with webdataset.TarWriter(str(path)) as sink:
        for sample in samples:
            sink.write(sample)
    return str(path)


def _laion(path, captions=CAPTIONS, meta: bool = True) -> str:
    samples = []
    for i, caption in enumerate(captions):
        sample = {"__key__": f"{i:09d}", "jpg": small_jpeg(i), "txt": caption}
        if meta:  # img2dataset's metadata: no label field
            sample["json"] = {"url": f"http://x/{i}.jpg", "caption": caption, "width": 32, "height": 32}
        samples.append(sample)
    return _write(path, samples)


def _caption_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "looks like captions" in r.getMessage()]


def test_caption_shards_are_unlabelled_with_one_warning_showing_fields(tmp_path, caplog):
    paths = [_laion(tmp_path / "laion-00000.tar"), _laion(tmp_path / "laion-00001.tar", CAPTIONS[::-1])]
    caplog.set_level(logging.WARNING, logger="turbofeed")
    loader = turbofeed.DataLoader(paths, batch_size=4, transform=T.imagenet_eval(32))
    labels = [y for _, ys in loader for y in ys.tolist()]
    assert labels == [-1] * 16
    assert loader.class_names is None
    assert loader.stats.skipped_at_index == 0
    warnings = _caption_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "16 samples" in warnings[0] and "'a dog running on the beach'" in warnings[0]
    assert 'fields={"image": "jpg", "caption": "txt", "meta": "json?"}' in warnings[0]
    assert not any("class names found" in r.getMessage() for r in caplog.records)  # no numbering of captions
    loader.close()


def test_the_fields_line_of_the_warning_loads_the_captions(tmp_path, caplog):
    path = _laion(tmp_path / "laion-00000.tar", meta=False)
    caplog.set_level(logging.WARNING, logger="turbofeed")
    IndexedDataset(path)
    (warning,) = _caption_warnings(caplog)
    line = warning.split("fields=", 1)[1].split("); if", 1)[0]
    assert line == '{"image": "jpg", "caption": "txt"}'
    caplog.clear()
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, fields=json.loads(line)), batch_size=8,
                                  transform=T.imagenet_eval(32))
    batch = next(iter(loader))
    assert batch["caption"] == CAPTIONS and tuple(batch["image"].shape) == (8, 3, 32, 32)
    assert _caption_warnings(caplog) == []  # asked for fields: nothing is read as a label
    loader.close()


def test_integer_txt_cls_and_json_labels_stay_labels(tmp_path, caplog):
    path = _write(tmp_path / "s.tar", [
        {"__key__": "a", "jpg": small_jpeg(0), "txt": "7"},
        {"__key__": "b", "jpg": small_jpeg(1), "txt": " 3\n"},
        {"__key__": "c", "jpg": small_jpeg(2), "cls": 5, "txt": "a caption beside a class"},
        {"__key__": "d", "jpg": small_jpeg(3), "json": {"label": 2, "caption": "x"}},
        {"__key__": "e", "jpg": small_jpeg(4), "txt": "a caption"},
    ])
    caplog.set_level(logging.WARNING, logger="turbofeed")
    ds = IndexedDataset(path)
    assert ds.labels.tolist() == [7, 3, 5, 2, -1]  # .cls wins over the caption; ints mixed with a caption is fine
    assert ds.class_names is None
    (warning,) = _caption_warnings(caplog)
    assert "1 samples" in warning and "'a caption' in" in warning and "/e" in warning


def test_an_empty_caption_is_an_unlabelled_sample_not_a_bad_one(tmp_path):
    data = tmp_path / "laion"
    data.mkdir()
    _laion(data / "laion-00000.tar", ["a cat", "", "   \n", "7"], meta=False)
    loader = turbofeed.DataLoader(str(data), batch_size=4, transform=T.imagenet_eval(32), return_keys=True)
    images, labels, keys = next(iter(loader))
    assert labels.tolist() == [-1, -1, -1, 7]
    assert keys == [f"laion-00000.tar/{i:09d}" for i in range(4)]  # none replaced
    assert loader.stats.skipped_at_index == 0 and loader.stats.errors == {}
    loader.close()
    build_index(str(data), progress=False)
    assert IndexedDataset(str(data)).labels.tolist() == [-1, -1, -1, 7]  # from the dataset index too


def test_json_class_names_are_numbered_as_before(tmp_path, caplog):
    path = _write(tmp_path / "s.tar", [{"__key__": f"k{i}", "jpg": small_jpeg(i), "json": {"label": n}}
                                       for i, n in enumerate(["emu", "cat", "emu"])])
    caplog.set_level(logging.WARNING, logger="turbofeed")
    ds = IndexedDataset(path)
    assert ds.class_names == ["cat", "emu"] and ds.labels.tolist() == [1, 0, 1]
    assert _caption_warnings(caplog) == []


def test_txt_class_names_with_classes_are_labels(tmp_path, caplog):
    path = _write(tmp_path / "s.tar", [{"__key__": f"k{i}", "jpg": small_jpeg(i), "txt": n}
                                       for i, n in enumerate(["dog", "cat", "dog"])])
    caplog.set_level(logging.WARNING, logger="turbofeed")
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, classes=["cat", "dog"]), batch_size=3,
                                  transform=T.imagenet_eval(32))
    assert next(iter(loader))[1].tolist() == [1, 0, 1]
    assert _caption_warnings(caplog) == []
    assert IndexedDataset(path).labels.tolist() == [-1, -1, -1]  # without classes: captions
    loader.close()


def test_the_dataset_index_gives_the_same_unlabelled_samples(tmp_path, caplog, per_shard):
    data = tmp_path / "laion"
    data.mkdir()
    _laion(data / "laion-00000.tar")
    _laion(data / "laion-00001.tar", [str(i) for i in range(4)] + CAPTIONS[:4])
    build_index(str(data), progress=False)
    caplog.set_level(logging.WARNING, logger="turbofeed")
    indexed, alone = IndexedDataset(str(data)), IndexedDataset(str(data), index=False)
    assert indexed.index is not None and alone.index is None
    assert indexed.labels.tolist() == alone.labels.tolist() == [-1] * 8 + [0, 1, 2, 3] + [-1] * 4
    assert indexed.content_print() == alone.content_print()
    assert len(_caption_warnings(caplog)) == 2  # one per IndexedDataset


def test_json_names_beside_an_empty_txt_are_numbered_and_the_empty_one_is_unlabelled(tmp_path, caplog):
    """No named sample holds a ``.txt``: nothing is taken as a caption, no caption warning."""
    path = _write(tmp_path / "s.tar", [
        {"__key__": "a", "jpg": small_jpeg(0), "json": {"label": "emu"}},
        {"__key__": "b", "jpg": small_jpeg(1), "txt": ""},
        {"__key__": "c", "jpg": small_jpeg(2), "json": {"label": "cat"}},
    ])
    caplog.set_level(logging.WARNING, logger="turbofeed")
    ds = IndexedDataset(path)
    assert ds.class_names == ["cat", "emu"] and ds.labels.tolist() == [1, -1, 0]
    assert _caption_warnings(caplog) == []


def test_json_names_beside_an_integer_txt_are_a_mix_refused_without_classes(tmp_path):
    """A ``.txt`` holding an integer is a label, so beside JSON class names it is the
    integers-and-names mix, refused without ``classes`` and numbered with them."""
    path = _write(tmp_path / "s.tar", [
        {"__key__": "a", "jpg": small_jpeg(0), "json": {"label": "emu"}},
        {"__key__": "b", "jpg": small_jpeg(1), "txt": "3"},
    ])
    with pytest.raises(turbofeed.DatasetError, match="mixes integer labels .* and class names"):
        IndexedDataset(path)
    assert IndexedDataset(path, classes=["cat", "emu", "x", "y"]).labels.tolist() == [1, 3]
