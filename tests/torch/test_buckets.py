"""Aspect-ratio buckets (issue 29, item 4): image sizes in the dataset index, one-bucket
batches of each bucket's shape, every sample once, determinism, equal steps on every
rank, exact resume, an older index rebuilt. Real tar shards and image folders written
by the tests."""

from __future__ import annotations

import logging
import os
from functools import partial

import numpy as np
import pytest
import torch
from builders import encode, photo, write_tar
from resume_check import LOADER, PLAN, PlanRun, check_resume

import turbofeed
from turbofeed.io.dsindex import fileformat
from turbofeed.io.dsindex.fileformat import read_index, write_index
from turbofeed.plan import Buckets, make_epoch_plan
from turbofeed.plan.buckets import bucket_order
from turbofeed import transforms as T
from turbofeed.transforms import BucketResize, Compose

BUCKETS = [(32, 32), (24, 48), (48, 24)]
# stored image sizes: square, wide (2:1 and 3:1: both the wide bucket), tall
SHAPES = [(64, 64), (48, 96), (40, 120), (96, 48)]


def _bucket_of(h: int, w: int) -> int:
    """The expected bucket, by hand: the nearest ratio on a log scale."""
    ratios = [bw / bh for bh, bw in BUCKETS]
    return int(np.argmin([abs(np.log((w / h) / r)) for r in ratios]))


def _data(folder, shards: int = 3, per_shard: int = 16) -> tuple[str, dict[str, tuple[int, int]]]:
    """Tar shards of JPEGs of the sizes of SHAPES in turn; key -> stored (h, w)."""
    os.makedirs(folder, exist_ok=True)
    truth, i = {}, 0
    for s in range(shards):
        members = []
        for _ in range(per_shard):
            h, w = SHAPES[i % len(SHAPES)]
            members += [(f"{i:05d}.jpg", encode(photo(h, w, seed=i))), (f"{i:05d}.cls", str(i % 5).encode())]
            truth[f"shard-{s}.tar/{i:05d}"] = (h, w)
            i += 1
        write_tar(os.path.join(folder, f"shard-{s}.tar"), members)
    return str(folder), truth


def _loader(data, **kw) -> turbofeed.DataLoader:
    kw.setdefault("batch_size", 4)
    return turbofeed.DataLoader(data, shuffle=True, buckets=BUCKETS, transform=Compose([BucketResize(BUCKETS)]),
                                return_keys=True, num_workers=2, **kw)


def _epoch(loader) -> list[tuple[tuple, list[str]]]:
    return [(tuple(x.shape), list(k)) for x, _, k in loader]


SHAPED = LOADER.but(keys=lambda batch: [tuple(batch[0].shape), *batch[2]])  # check_resume: the shape, then the keys


# -- the plan (pure) --------------------------------------------------------------------

def test_bucket_order_is_one_bucket_per_global_batch_every_sample_once_and_deterministic():
    groups = np.array([0] * 13 + [1] * 7 + [2] * 20, np.int64)
    np.random.default_rng(5).shuffle(groups)
    g = 3 * 2  # batch 3, world 2
    order = bucket_order(groups, batch_size=3, world_size=2, seed=1, epoch=4, shuffle=True, drop_last=False)
    chunks = order.reshape(-1, g)
    assert all(len(set(groups[c])) == 1 for c in chunks)
    assert set(order.tolist()) == set(range(len(groups)))  # every sample; padding from its own bucket
    assert len(order) == g * sum(-(-c // g) for c in (13, 7, 20))
    again = bucket_order(groups, batch_size=3, world_size=2, seed=1, epoch=4, shuffle=True, drop_last=False)
    other = bucket_order(groups, batch_size=3, world_size=2, seed=1, epoch=5, shuffle=True, drop_last=False)
    assert np.array_equal(order, again) and not np.array_equal(order, other)
    dropped = bucket_order(groups, batch_size=3, world_size=2, seed=1, epoch=4, shuffle=True, drop_last=True)
    assert len(dropped) == g * (13 // g + 7 // g + 20 // g) and len(set(dropped.tolist())) == len(dropped)


@pytest.mark.parametrize("drop_last", [False, True])
def test_plan_gives_every_rank_equal_one_bucket_batches_and_resumes_exactly(drop_last):
    groups = np.repeat(np.arange(3), [11, 5, 17]).astype(np.int64)
    plans = [make_epoch_plan(len(groups), batch_size=2, seed=0, epoch=1, shuffle=True, rank=r, world_size=2,
                             drop_last=drop_last, buckets=groups) for r in range(2)]
    assert len(plans[0]) == len(plans[1]) > 0
    for k in range(len(plans[0])):
        ids = [plans[r].order[list(plans[r].batch_positions(k))] for r in range(2)]
        assert len({int(b) for i in ids for b in groups[i]}) == 1  # one bucket on both ranks at step k
    ranks = partial(PlanRun, lambda rank, world_size, epoch, start: make_epoch_plan(
        len(groups), batch_size=2, seed=0, epoch=epoch, shuffle=True, rank=rank, world_size=world_size,
        drop_last=drop_last, start=start, buckets=groups), world_size=2, batch_size=2, epoch=1)
    steps = len(plans[0])
    check_resume(ranks, stops=[0, 3, steps - 1, steps, steps + 3], epochs=2, kind=PLAN)  # into epoch 2 too


def test_buckets_assign_as_one_image_would_and_parse_specs():
    b = Buckets.make(BUCKETS)
    h = np.array([64, 48, 40, 96, 0, 100, 77])
    w = np.array([64, 96, 120, 48, 0, 141, 77])
    assert b.assign(h, w).tolist() == [b.of(int(y), int(x)) for y, x in zip(h, w)]
    assert [b.sizes[i] for i in b.assign(h[:4], w[:4])] == [BUCKETS[_bucket_of(*s)] for s in SHAPES]
    assert len(Buckets.make("aspect")) == 9
    sizes = Buckets.make([0.5, 1.0, 2.0], area=4096 * 4, multiple=8).sizes
    assert np.allclose([w / h for h, w in sizes], [0.5, 1.0, 2.0], rtol=0.06)
    assert all(h % 8 == 0 and w % 8 == 0 and abs(h * w / 16384 - 1) < 0.1 for h, w in sizes)
    for bad in ([], [(0, 4)], [-1.0], "square", [(4, 4), (8, 8)]):
        with pytest.raises(ValueError):
            Buckets.make(bad)


# -- the index --------------------------------------------------------------------------

def test_the_index_records_each_image_size_from_its_header(tmp_path):
    data, truth = _data(tmp_path / "d")
    loader = turbofeed.DataLoader(data, batch_size=4)  # builds the index
    header, arrays = read_index(loader.dataset.index.path)
    assert header["version"] == fileformat.VERSION >= 4
    got = {}
    for s in loader.dataset.sources:
        for k, hh, ww in zip(s.table.keys, s.table.heights, s.table.widths):
            got[f"{os.path.basename(s.path)}/{k}"] = (int(hh), int(ww))
    assert got == truth
    assert sorted(zip(arrays["height"].tolist(), arrays["width"].tolist())) == sorted(truth.values())


def test_an_index_of_the_previous_version_is_refused_and_rebuilt_with_sizes(tmp_path, caplog, monkeypatch):
    data, truth = _data(tmp_path / "d")
    index = turbofeed.io.IndexedDataset(data).index.path
    header, arrays = read_index(index)
    old = {name: np.array(a) for name, a in arrays.items() if name not in ("height", "width")}
    monkeypatch.setattr(fileformat, "VERSION", 3)  # what the index was before sizes
    write_index(index, header, old)
    monkeypatch.undo()
    assert "height" not in _raw_arrays(index)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        loader = _loader(data)
    assert "format version 3" in caplog.text
    assert read_index(index)[0]["version"] == fileformat.VERSION and "height" in read_index(index)[1]
    assert sorted(k for _, keys in _epoch(loader) for k in keys) == sorted(truth)


def _raw_arrays(path: str) -> dict:
    """The array names an index file's header lists, read without the version check."""
    import json
    import struct
    with open(path, "rb") as f:
        _, at, length, _ = struct.unpack("<8sQQI", f.read(28))
        f.seek(at)
        return json.loads(f.read(length))["arrays"]


# -- the loader -------------------------------------------------------------------------

def test_every_batch_holds_one_bucket_in_its_shape_and_every_sample_once(tmp_path):
    data, truth = _data(tmp_path / "d")  # 48 samples: 12 square, 24 wide, 12 tall: whole batches of 4
    loader = _loader(data)
    batches = _epoch(loader)
    assert len(batches) == len(loader) == 12
    for shape, keys in batches:
        buckets = {_bucket_of(*truth[k]) for k in keys}
        assert len(buckets) == 1 and shape == (4, 3, *BUCKETS[buckets.pop()])
    assert sorted(k for _, keys in batches for k in keys) == sorted(truth)
    assert _epoch(_loader(data)) == batches  # deterministic per (seed, epoch)
    again = _loader(data)
    again.set_epoch(1)
    assert _epoch(again) != batches


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_ranks_take_equal_steps_of_one_bucket(tmp_path, drop_last):
    data, truth = _data(tmp_path / "d", per_shard=15)  # 45 samples: no bucket fills whole global batches
    ranks = [_epoch(_loader(data, rank=r, world_size=2, drop_last=drop_last, batch_size=3)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(_loader(data, rank=0, world_size=2, drop_last=drop_last,
                                                          batch_size=3))
    for (s0, k0), (s1, k1) in zip(*ranks):
        assert s0 == s1 and len({_bucket_of(*truth[k]) for k in k0 + k1}) == 1
    seen = [k for r in ranks for _, keys in r for k in keys]
    if drop_last:
        assert len(seen) == len(set(seen)) and len(seen) > 0
    else:
        assert set(seen) == set(truth)  # padded from each bucket's own samples


def test_resume_mid_epoch_gives_exactly_the_remaining_batches(tmp_path):
    data, _ = _data(tmp_path / "d")
    (run,) = check_resume(lambda: _loader(data), stops=[5], kind=SHAPED).runs
    other = _loader(data, rank=0, world_size=2)
    with pytest.raises(ValueError, match="plan"):  # the cut into global batches depends on the world size
        other.load_state_dict(run.state)


def test_a_bad_sample_is_replaced_from_its_own_bucket(tmp_path):
    data, truth = _data(tmp_path / "d", shards=1, per_shard=16)
    members = []
    for i in range(16):  # sample 5 (a wide one) damaged: the JPEG's data cut off after its header
        h, w = SHAPES[i % len(SHAPES)]
        jpg = encode(photo(h, w, seed=i))
        members += [(f"{i:05d}.jpg", jpg[:400] if i == 5 else jpg), (f"{i:05d}.cls", b"1")]
    write_tar(os.path.join(data, "shard-0.tar"), members)
    batches = _epoch(_loader(data))
    for shape, keys in batches:
        assert {_bucket_of(*truth[k]) for k in keys} == {BUCKETS.index(shape[2:])}
    assert "shard-0.tar/00005" not in [k for _, keys in batches for k in keys]


def _with_tall(folder, tall: list[bool], squares: int = 40) -> str:
    """One shard: ``squares`` good square JPEGs, then one tall JPEG per ``tall`` entry
    (False: its data cut off after an intact header, so it is bucketed and then bad)."""
    os.makedirs(folder, exist_ok=True)
    members = []
    for i in range(squares):
        members += [(f"{i:05d}.jpg", encode(photo(64, 64, seed=i))), (f"{i:05d}.cls", b"1")]
    for k, good in enumerate(tall):
        jpg = encode(photo(96, 48, seed=100 + k))
        members += [(f"t{k:04d}.jpg", jpg if good else jpg[:len(jpg) // 2]), (f"t{k:04d}.cls", b"2")]
    return write_tar(os.path.join(folder, "shard-0.tar"), members)


def test_a_bad_sample_alone_in_its_bucket_drops_that_batch_not_the_run(tmp_path):
    """A damaged panorama whose header is intact, alone in its bucket among 40 good images:
    the replacement looked only inside the bucket and raised DatasetError "the dataset
    looks unreadable" (issue 37 #5). Now its batch is dropped, counted in stats."""
    data = _with_tall(tmp_path / "d", [False])
    loader = _loader(data, batch_size=4)
    batches = _epoch(loader)
    keys = [k for _, ks in batches for k in ks]
    assert len(batches) == 10 and all(shape[2:] == (32, 32) for shape, _ in batches)
    assert sorted(keys) == sorted(f"shard-0.tar/{i:05d}" for i in range(40))
    assert loader.stats.dropped_batches == 1 and loader.stats.errors == {"decode.cpu": 1}
    assert loader.stats.skipped == 4 and loader.stats.as_dict()["dropped_batches"] == 1
    assert loader.state_dict()["epoch"] == 1  # the epoch is done: the next one starts
    assert len(_epoch(loader)) == 10 and loader.stats.dropped_batches == 2  # and so in the next
    # resumed after 3 batches: the rest, the dropped batch left out as before
    check_resume(lambda: _loader(data, batch_size=4), stops=[3], kind=SHAPED)


def test_a_bad_sample_of_a_bucket_is_replaced_from_the_bucket_beyond_this_ranks_share(tmp_path):
    """Two tall images, the first bad: on a rank whose share of the tall bucket holds only
    the bad one, the good one (another rank's, or a later epoch's) fills the slots."""
    data = _with_tall(tmp_path / "d", [False, True], squares=30)
    shares = []
    for rank in range(2):
        loader = _loader(data, batch_size=4, rank=rank, world_size=2)
        batches = _epoch(loader)
        tall = [ks for shape, ks in batches if shape[2:] == (48, 24)]
        assert len(tall) == 1 and tall[0] == ["shard-0.tar/t0001"] * 4
        assert loader.stats.dropped_batches == 0
        shares.append(batches)
    assert [len(b) for b in shares] == [5, 5]


def test_a_rank_without_any_good_sample_still_raises(tmp_path):
    data = _with_tall(tmp_path / "d", [False, False], squares=0)
    with pytest.raises(turbofeed.DatasetError, match="no good sample in this rank's 8 samples"):
        _epoch(_loader(data, batch_size=4))


def test_an_image_folder_has_its_sizes_read_and_a_wrong_transform_is_refused(tmp_path):
    truth = {}
    for i in range(12):
        h, w = SHAPES[i % len(SHAPES)]
        os.makedirs(tmp_path / "f" / f"c{i % 2}", exist_ok=True)
        photo(h, w, seed=i).save(tmp_path / "f" / f"c{i % 2}" / f"{i:03d}.png")
        truth[i] = (h, w)
    loader = turbofeed.DataLoader(turbofeed.Dataset(str(tmp_path / "f"), classes=["c0", "c1"]), batch_size=2,
                                  buckets=BUCKETS, num_workers=2,
                                  transform=Compose([BucketResize(BUCKETS)]))
    shapes = [tuple(x.shape) for x, _ in loader]
    per_bucket = np.bincount([_bucket_of(*hw) for hw in truth.values()], minlength=3)  # 3, 6, 3
    assert sorted(shapes) == sorted(s for b, n in enumerate(per_bucket) for s in [(2, 3, *BUCKETS[b])] * -(-n // 2))
    with pytest.raises(ValueError, match="other buckets"):
        turbofeed.DataLoader(turbofeed.Dataset(str(tmp_path / "f"), classes=["c0", "c1"]), batch_size=2,
                             buckets="aspect",
                             transform=Compose([BucketResize(BUCKETS)]))


def test_normalize_after_bucket_resize_gives_float_batches_of_the_uint8_ones(tmp_path):
    data, _ = _data(tmp_path / "d", shards=1)
    plain = _epoch_images(_loader(data))
    normed = _epoch_images(turbofeed.DataLoader(data, shuffle=True, buckets=BUCKETS, batch_size=4, num_workers=2,
                                                transform=Compose([BucketResize(BUCKETS), T.Normalize()])))
    assert len(plain) == len(normed) > 0
    mean = torch.tensor(T.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(T.IMAGENET_STD).view(1, 3, 1, 1)
    for u8, f32 in zip(plain, normed):
        assert u8.dtype == torch.uint8 and f32.dtype == torch.float32 and u8.shape == f32.shape
        assert torch.allclose(f32, (u8.float() / 255 - mean) / std, atol=1e-5)


def _epoch_images(loader) -> list:
    return [batch[0] for batch in loader]


def test_fields_batches_and_ratio_buckets_sized_to_an_area(tmp_path):
    data, truth = _data(tmp_path / "d", shards=1)
    ratios = [0.5, 1.0, 2.0]
    resize = BucketResize(ratios, area=32 * 32, multiple=8)
    assert resize.buckets.sizes == ((48, 24), (32, 32), (24, 48))
    loader = turbofeed.DataLoader(turbofeed.Dataset(data, fields={"image": "jpg", "label": "cls"}), batch_size=4,
                                  buckets=ratios, num_workers=2, transform=Compose([resize]))
    keys = []
    for batch in loader:  # __key__ is the sample key; truth names shard-0.tar/KEY
        batch["__key__"] = [f"shard-0.tar/{k}" for k in batch["__key__"]]
        sizes = {resize.buckets.sizes[resize.buckets.of(*truth[k])] for k in batch["__key__"]}
        assert sizes == {tuple(batch["image"].shape[2:])} and batch["image"].shape[0] == 4
        keys += batch["__key__"]
    assert sorted(keys) == sorted(truth)
    with pytest.raises(ValueError, match="streaming"):
        turbofeed.DataLoader(turbofeed.Dataset(data, streaming=True), batch_size=4, buckets=ratios,
                             transform=Compose([resize]))
    with pytest.raises(ValueError, match="apply_exif_orientation"):
        turbofeed.DataLoader(data, batch_size=4, buckets=ratios, transform=Compose([resize]),
                             apply_exif_orientation=True)


def _late_header_jpeg(h: int, w: int, seed: int) -> bytes:
    """A JPEG whose size (SOF marker) lies past the first 16 KiB: a 40 KB ICC profile first."""
    data = encode(photo(h, w, seed=seed), icc_profile=bytes(range(256)) * 160)
    assert data.find(b"\xff\xc0") > 16 << 10 or data.find(b"\xff\xc2") > 16 << 10
    return data


@pytest.mark.parametrize("index", [None, False, "per-shard"])
def test_sizes_behind_a_large_header_and_without_the_index(tmp_path, request, index):
    """Sizes come from the index (index=None, or built in memory: index=False) or are read
    when the loader starts (per-shard tables, as for compressed shards); a header past the
    first read is found either way."""
    if index == "per-shard":
        request.getfixturevalue("per_shard")
        index = False
    folder = tmp_path / "d"
    folder.mkdir()
    members, truth = [], {}
    for i in range(8):
        h, w = SHAPES[i % len(SHAPES)]
        members += [(f"{i:05d}.jpg", _late_header_jpeg(h, w, i) if i < 4 else encode(photo(h, w, seed=i))),
                    (f"{i:05d}.cls", b"0")]
        truth[f"shard-0.tar/{i:05d}"] = (h, w)
    write_tar(str(folder / "shard-0.tar"), members)
    loader = _loader(str(folder), batch_size=2, index=index)
    assert (loader.dataset.index is None) == (request.node.callspec.params["index"] == "per-shard")
    batches = _epoch(loader)
    for shape, keys in batches:
        assert {BUCKETS[_bucket_of(*truth[k])] for k in keys} == {shape[2:]}
    assert sorted(k for _, keys in batches for k in keys) == sorted(truth)


def test_a_launcher_seen_after_construction_cuts_and_fingerprints_for_its_world(tmp_path, monkeypatch):
    """Lightning starts the ranks after the loader is built: the bucketed cut and the
    resume state follow the world size of the pass, so a new process of that world resumes."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    data, _ = _data(tmp_path / "d")
    loader = _loader(data)
    assert loader.world_size == 1
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    it = iter(loader)
    first = [(tuple(x.shape), list(k)) for _, (x, _, k) in zip(range(2), it)]
    state = loader.state_dict()
    del it
    full = _epoch(_loader(data))  # built under the launcher: rank 0 of 2
    assert first == full[:2] and state["world_size"] == 2
    resumed = _loader(data)
    resumed.load_state_dict(state)
    assert _epoch(resumed) == full[2:]


def test_bucketed_slots_in_channels_last_and_bucket_resize_first(tmp_path):
    data, _ = _data(tmp_path / "d", shards=1)
    plain = _epoch_images(_loader(data))
    nhwc = _epoch_images(_loader(data, channels_last=True))
    assert len(plain) == len(nhwc) > 0
    for a, b in zip(plain, nhwc):
        assert torch.equal(a, b) and b.is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(ValueError, match="first geometric op"):
        turbofeed.DataLoader(data, batch_size=4, buckets=BUCKETS,
                             transform=Compose([T.Resize(64), BucketResize(BUCKETS)]))


def test_a_state_saved_after_the_last_batch_resumes_at_the_next_epoch(tmp_path):
    """A state taken once every batch of a bucketed epoch was delivered (a checkpoint at
    the epoch's end) resumes at the next epoch's start, as without buckets: not at the
    plan's end, where the batch stream found nothing and said every batch was dropped."""
    data, _ = _data(tmp_path / "d")
    (run,) = check_resume(lambda: _loader(data), stops=[12], epochs=2, kind=SHAPED).runs  # 12 batches an epoch
    assert (run.epoch, run.step, run.state["epoch"], run.state["batches_done"]) == (0, 12, 1, 0)
    assert len(run.tail) == 12
