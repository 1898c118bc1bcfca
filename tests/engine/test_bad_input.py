"""Bad input never crashes, hangs or changes batch shapes silently: it is replaced, skipped
and counted, or raised with the shard and key, as configured."""

from __future__ import annotations

import logging
import os
from collections import Counter

import numpy as np
import pytest
import torch

import turbofeed
from turbofeed import transforms as T

BAD = ("empty", "truncated", "garbage")


@pytest.fixture
def dirty_shard(tmp_path, odd_images, tar_writer):
    """20 samples: 17 good images of every kind (RGB, gray, CMYK, progressive, PNG) and
    3 bad ones (zero-byte, truncated JPEG, not an image)."""
    good_kinds = ["rgb", "gray", "cmyk", "progressive", "png_rgba", "png_palette"]
    members, bad_keys = [], []
    for i in range(20):
        key = f"s{i:03d}"
        if i in (4, 9, 15):
            kind = BAD[(4, 9, 15).index(i)]
            bad_keys.append(key)
        else:
            kind = good_kinds[i % len(good_kinds)]
        ext = "png" if kind.startswith("png") else "jpg"
        members += [(f"{key}.{ext}", odd_images[kind]), (f"{key}.cls", str(i).encode())]
    return tar_writer(str(tmp_path / "dirty.tar"), members), bad_keys


def test_replace_keeps_batch_shape_and_counts(dirty_shard, caplog):
    path, bad_keys = dirty_shard
    loader = turbofeed.DataLoader(path, batch_size=5, num_workers=2, transform=T.imagenet_eval(32),
                                  return_keys=True)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        batches = list(loader)
    assert [len(x) for x, _, _ in batches] == [5, 5, 5, 5]
    keys = [k for _, _, ks in batches for k in ks]
    assert not any(k.split("/")[1] in bad_keys for k in keys)
    # Each bad slot holds the next good sample of the order: s005 after s004, etc.
    assert keys[4] == "dirty.tar/s005" and keys[9] == "dirty.tar/s010" and keys[15] == "dirty.tar/s016"
    labels = torch.cat([y for _, y, _ in batches]).tolist()
    assert labels[4] == 5 and labels[15] == 16
    assert loader.stats.replaced == 3
    assert sum(loader.stats.errors.values()) == 3
    for key in bad_keys:
        assert any(f"dirty.tar/{key}" in r.getMessage() for r in caplog.records), key


def test_odd_but_valid_images_come_out_rgb(dirty_shard):
    path, _ = dirty_shard
    loader = turbofeed.DataLoader(path, batch_size=20, num_workers=2, on_error="skip")
    images, labels = next(iter(loader))
    assert len(images) == 17
    for img in images:
        assert img.dtype == torch.uint8 and img.shape == (3, 96, 128)
    gray = images[labels.tolist().index(1)]  # s001 is the grayscale JPEG
    assert torch.equal(gray[0], gray[1]) and torch.equal(gray[1], gray[2])


def test_skip_drops_bad_samples_and_counts_them(dirty_shard):
    path, _ = dirty_shard
    loader = turbofeed.DataLoader(path, batch_size=5, num_workers=2, on_error="skip",
                                  transform=T.imagenet_eval(32))
    sizes = [len(x) for x, _ in loader]
    assert sizes == [4, 4, 5, 4] and sum(sizes) == 17
    assert loader.stats.skipped == 3 and loader.stats.samples == 17


def test_raise_names_shard_key_and_stage(dirty_shard):
    path, _ = dirty_shard
    loader = turbofeed.DataLoader(path, batch_size=5, num_workers=2, on_error="raise",
                                  transform=T.imagenet_eval(32))
    with pytest.raises(turbofeed.SampleError) as info:
        list(loader)
    err = info.value
    assert err.shard == path and err.key == "s004" and err.stage == "decode.cpu"
    assert str(err).startswith(f"decode.cpu: {path}/s004: ")
    assert "empty" in err.reason


def test_pipeline_applies_the_same_policy(dirty_shard):
    path, bad_keys = dirty_shard
    with turbofeed.Pipeline(path, num_workers=2, on_error="skip") as pipe:
        keys = [s.key for s in pipe]
    assert len(keys) == 17 and not set(keys) & set(bad_keys)
    pipe = turbofeed.Pipeline(path, num_workers=2, on_error="raise")
    with pytest.raises(turbofeed.SampleError, match="s004"):
        while pipe.next_batch(8):
            pass
    pipe.stop()


def test_all_bad_data_raises_instead_of_hanging(tmp_path, odd_images, tar_writer):
    members = [(f"k{i}.jpg", odd_images["garbage"]) for i in range(70)]
    path = tar_writer(str(tmp_path / "rubbish.tar"), members)
    loader = turbofeed.DataLoader(path, batch_size=4, num_workers=2, transform=T.imagenet_eval(32))
    with pytest.raises(turbofeed.DatasetError, match="no good sample in this rank's 70"):
        next(iter(loader))


def _corrupt_jpeg(odd_images: dict, i: int) -> bytes:
    """A JPEG cut short, different for each ``i`` (real header, truncated scan)."""
    good = odd_images["rgb"]
    return good[: len(good) // 3 + i]


@pytest.fixture
def bad_run_shard(tmp_path, odd_images, tar_writer):
    """140 samples: 10 good (g000..g009), 120 consecutive corrupt JPEGs (b000..b119),
    10 good (h000..h009). Labels: the good ones 1, the bad ones 0."""
    members = []
    for i in range(10):
        members += [(f"g{i:03d}.jpg", odd_images["rgb"]), (f"g{i:03d}.cls", b"1")]
    for i in range(120):
        members += [(f"b{i:03d}.jpg", _corrupt_jpeg(odd_images, i)), (f"b{i:03d}.cls", b"0")]
    for i in range(10):
        members += [(f"h{i:03d}.jpg", odd_images["gray"]), (f"h{i:03d}.cls", b"1")]
    return tar_writer(str(tmp_path / "badrun.tar"), members)


def _count_fetches(monkeypatch) -> Counter:
    from turbofeed.engine.work import SampleWork

    fetches: Counter = Counter()
    real = SampleWork.fetch

    def counted(self, gid, **kw):
        fetches[gid] += 1
        return real(self, gid, **kw)
    monkeypatch.setattr(SampleWork, "fetch", counted)
    return fetches


def test_a_long_bad_run_is_replaced_not_fatal(bad_run_shard, monkeypatch, caplog):
    """120 bad in a row (more than any fixed retry cap): every slot of the run holds the
    next good sample of the order (h000), batches stay full, each bad sample is read,
    counted and logged once, not once per slot that tried it as a replacement."""
    fetches = _count_fetches(monkeypatch)
    loader = turbofeed.DataLoader(bad_run_shard, batch_size=8, num_workers=2, transform=T.imagenet_eval(32),
                                  return_keys=True)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        batches = list(loader)
    assert [len(x) for x, _, _ in batches] == [8] * 17 + [4]
    keys = [k.split("/")[1] for _, _, ks in batches for k in ks]
    assert keys == [f"g{i:03d}" for i in range(10)] + ["h000"] * 120 + [f"h{i:03d}" for i in range(10)]
    assert torch.cat([y for _, y, _ in batches]).tolist() == [1] * 140
    assert loader.stats.replaced == 120
    assert sum(loader.stats.errors.values()) == 120  # distinct bad samples, not attempts
    warned = [r.getMessage() for r in caplog.records if "bad sample" in r.getMessage()]
    assert len(warned) == 120 and len(set(warned)) == 120
    bad_ids = [gid for gid in range(10, 130)]
    # Known-bad samples are not fetched again for later slots (2 threads may race once).
    assert sum(fetches[g] for g in bad_ids) <= 2 * 120, sum(fetches[g] for g in bad_ids)


def test_replacements_wrap_around_the_rank_order(tmp_path, odd_images, tar_writer):
    """Good sample first, then 100 bad: the run's slots wrap around to the order's start."""
    members = [("a.jpg", odd_images["rgb"])] + [(f"z{i:03d}.jpg", _corrupt_jpeg(odd_images, i))
                                                 for i in range(100)]
    path = tar_writer(str(tmp_path / "wrap.tar"), members)
    loader = turbofeed.DataLoader(path, batch_size=16, num_workers=2, transform=T.imagenet_eval(32),
                                  return_keys=True)
    keys = [k for _, _, ks in loader for k in ks]
    assert keys == ["wrap.tar/a"] * 101
    assert loader.stats.replaced == 100 and sum(loader.stats.errors.values()) == 100


def test_a_short_bad_run_counts_each_bad_sample_once(tmp_path, odd_images, tar_writer, caplog):
    """5 bad in a row: the first slot's search tries all five; each is still one error."""
    members = []
    for i in range(20):
        data = _corrupt_jpeg(odd_images, i) if 5 <= i < 10 else odd_images["rgb"]
        members += [(f"s{i:03d}.jpg", data)]
    path = tar_writer(str(tmp_path / "run5.tar"), members)
    loader = turbofeed.DataLoader(path, batch_size=4, num_workers=2, transform=T.imagenet_eval(32),
                                  return_keys=True)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        keys = [k for _, _, ks in loader for k in ks]
    assert keys[5:10] == ["run5.tar/s010"] * 5
    assert loader.stats.errors == {"decode.cpu": 5} and loader.stats.replaced == 5
    assert sum("bad sample" in r.getMessage() for r in caplog.records) == 5
    list(loader)  # the same bad samples again in the next epoch: still five distinct ones
    assert loader.stats.errors == {"decode.cpu": 5} and loader.stats.replaced == 10


def test_pipeline_replaces_a_long_bad_run(bad_run_shard):
    with turbofeed.Pipeline(bad_run_shard, num_workers=2) as pipe:
        keys = [s.key for s in pipe]
    assert keys == [f"g{i:03d}" for i in range(10)] + ["h000"] * 120 + [f"h{i:03d}" for i in range(10)]
    assert pipe.stats.replaced == 120 and sum(pipe.stats.errors.values()) == 120


@pytest.fixture
def truncated_shard(shard_paths, tmp_path):
    """The first 60% of a real shard: the tar ends in the middle of a member."""
    data = open(shard_paths[0], "rb").read()
    path = tmp_path / "cut.tar"
    path.write_bytes(data[: int(len(data) * 0.6)])
    return str(path)


def test_truncated_tar_raises_with_file_and_offset(truncated_shard):
    with pytest.raises(turbofeed.DatasetError) as info:
        turbofeed.DataLoader(truncated_shard, on_error="raise", transform=T.imagenet_eval(32))
    message = str(info.value)
    assert truncated_shard in message and "byte offset" in message
    offset = int(message.split("byte offset ")[1].split(":")[0])
    assert 0 < offset < os.path.getsize(truncated_shard)


def test_truncated_tar_keeps_the_samples_before_the_damage(truncated_shard, caplog):
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        loader = turbofeed.DataLoader(truncated_shard, batch_size=8, transform=T.imagenet_eval(32),
                                      return_keys=True)
    assert 15 <= loader.num_samples < 40
    assert loader.stats.damaged_shards == [truncated_shard]
    assert any("truncated" in r.getMessage() and truncated_shard in r.getMessage() for r in caplog.records)
    keys = [k for _, _, ks in loader for k in ks]
    assert len(keys) == loader.num_samples == len(set(keys))


def test_empty_and_missing_inputs_give_clear_messages(tmp_path, tar_writer):
    with pytest.raises(turbofeed.DatasetError, match="no such file or directory: .*nope.tar"):
        turbofeed.DataLoader(str(tmp_path / "nope.tar"))
    with pytest.raises(turbofeed.DatasetError, match=r"shard-0000\d\d.tar and \d+ more \(from pattern"):
        turbofeed.DataLoader(str(tmp_path / "shard-{000000..000009}.tar"))
    with pytest.raises(turbofeed.DatasetError, match="empty list"):
        turbofeed.DataLoader([])
    empty = tar_writer(str(tmp_path / "empty.tar"), [])
    with pytest.raises(turbofeed.DatasetError, match="no samples found in .*empty.tar"):
        turbofeed.DataLoader(empty)
    labels_only = tar_writer(str(tmp_path / "labels.tar"), [("a.cls", b"1"), ("b.cls", b"2")])
    with pytest.raises(turbofeed.DatasetError, match=r"no samples found in .*labels.tar .*1 damaged or empty"):
        turbofeed.DataLoader(labels_only)  # a shard without any image: reported, nothing to load
    with pytest.raises(turbofeed.DatasetError, match="no samples .*2 keys, none with an image member"):
        turbofeed.DataLoader(labels_only, on_error="raise")
    (tmp_path / "no_images").mkdir()
    with pytest.raises(turbofeed.DatasetError, match="no images found"):
        turbofeed.DataLoader(str(tmp_path / "no_images"))
    with pytest.raises(ValueError, match="on_error"):
        turbofeed.DataLoader(empty, on_error="ignore")


def test_images_of_the_wrong_size_without_a_crop_are_replaced_not_mixed(tmp_path, odd_images, tar_writer):
    """Resize(int) keeps the aspect ratio, so sizes vary: such a transform yields lists."""
    path = tar_writer(str(tmp_path / "two.tar"), [("a.jpg", odd_images["rgb"]), ("b.jpg", odd_images["gray"])])
    loader = turbofeed.DataLoader(path, batch_size=2, transform=[T.Resize(48)])
    images, _ = next(iter(loader))
    assert isinstance(images, list) and [tuple(i.shape) for i in images] == [(3, 48, 64)] * 2
    assert np.all(loader.dataset.labels == -1)
