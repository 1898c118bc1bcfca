"""turbofeed on a real local Ray instance (turbofeed/ray): every sample once per epoch,
the DataLoader's pixels and labels whichever process decoded them (actors, or the
trainer from shipped bytes), an exact resume from a trainer's state, bad samples under
on_error. Ray runs here as its users run it on one node: ``ray.init`` with 2 CPUs."""

from __future__ import annotations

import json

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="turbofeed[ray] is not installed")

import turbofeed  # noqa: E402
import turbofeed.ray as tray  # noqa: E402
from builders import encode, photo, write_tar  # noqa: E402
from image_cases import ones_in_scan  # noqa: E402
from turbofeed import transforms as T  # noqa: E402
from turbofeed.errors import SampleError, StorageError  # noqa: E402

SEED, EPOCH, SIZE = 7, 2, 32


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def transform():
    return T.imagenet_train(SIZE)


def local(shards) -> dict[str, tuple[np.ndarray, int]]:
    """Each sample's pixels and label from turbofeed.DataLoader at (SEED, EPOCH)."""
    loader = turbofeed.DataLoader(shards, batch_size=16, shuffle=True, seed=SEED, transform=transform(),
                                  return_keys=True, num_workers=2)
    loader.set_epoch(EPOCH)
    out = {}
    for images, labels, keys in loader:
        out.update({k: (x.numpy().copy(), int(y)) for k, x, y in zip(keys, images, labels)})
    return out


def delivered(loader) -> dict[str, tuple[np.ndarray, int]]:
    out: dict[str, tuple[np.ndarray, int]] = {}
    for images, labels, keys in loader:
        for k, x, y in zip(keys, images, labels):
            assert k not in out, f"{k} delivered twice"
            out[k] = (x.numpy().copy(), int(y))
    return out


def same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for key, (pixels, label) in want.items():
        assert got[key][1] == label, key
        np.testing.assert_array_equal(got[key][0], pixels, err_msg=key)


def test_actors_decode_the_dataloaders_pixels_once_each(cluster, shards):
    rows = tray.read(shards, seed=SEED, epoch=EPOCH, transform=transform(), decoders=1, rows_per_task=25)
    loader = tray.loader(rows, batch_size=16, epoch=EPOCH, return_keys=True)
    got = delivered(loader)
    same(got, local(shards))
    assert loader.stats.samples == 120 and loader.state_dict()["consumed"] == [[0, 120]]


def test_the_trainer_decodes_shipped_bytes_to_the_same_pixels(cluster, shards):
    rows = tray.read(shards, seed=SEED, epoch=EPOCH)
    first = rows.take(1)[0]
    assert first["data"][:2] == b"\xff\xd8" and first["label"] >= 0
    loader = tray.loader(rows, batch_size=16, data=shards, transform=transform(), seed=SEED, epoch=EPOCH,
                         return_keys=True)
    same(delivered(loader), local(shards))


def test_a_restart_reads_exactly_what_was_not_consumed(cluster, shards):
    """A trainer stops after 3 batches; its state, through JSON, makes the restart read
    the complement: nothing lost, nothing twice; the restarted trainer's state covers
    the whole epoch."""
    make = dict(seed=SEED, epoch=EPOCH, transform=transform(), decoders=1, rows_per_task=20)
    first = tray.loader(tray.read(shards, **make), batch_size=10, epoch=EPOCH, return_keys=True)
    head: dict = {}
    batches = iter(first)
    for _ in range(3):
        images, labels, keys = next(batches)
        head.update({k: (x.numpy().copy(), int(y)) for k, x, y in zip(keys, images, labels)})
    state = json.loads(json.dumps(first.state_dict()))
    assert sum(b - a for a, b in state["consumed"]) == 30
    second = tray.loader(tray.read(shards, resume=[state], **make), batch_size=10, epoch=EPOCH, return_keys=True)
    second.load_state_dict(state)
    tail = delivered(second)
    assert not set(head) & set(tail)
    same({**head, **tail}, local(shards))
    assert second.state_dict()["consumed"] == [[0, 120]]


@pytest.fixture
def damaged_shard(tmp_path) -> str:
    """12 JPEGs, key 04 with its scan damaged and key 07 not an image."""
    good = [encode(photo(60 + i, 80, seed=i), quality=90) for i in range(12)]
    bad = {"04": ones_in_scan(good[4]), "07": b"not an image at all" * 10}
    members = []
    for i, jpg in enumerate(good):
        members += [(f"{i:02d}.jpg", bad.get(f"{i:02d}", jpg)), (f"{i:02d}.cls", str(i).encode())]
    return write_tar(str(tmp_path / "bad.tar"), members)


@pytest.mark.parametrize("where", ["actors", "trainer"])
def test_bad_samples_are_skipped_counted_and_consumed(cluster, damaged_shard, where):
    kw = dict(seed=SEED, epoch=EPOCH, on_error="skip")
    if where == "actors":
        loader = tray.loader(tray.read(damaged_shard, transform=transform(), decoders=1, **kw), batch_size=5,
                             epoch=EPOCH, on_error="skip", return_keys=True)
    else:
        loader = tray.loader(tray.read(damaged_shard, **kw), batch_size=5, data=damaged_shard,
                             transform=transform(), return_keys=True, **kw)
    keys = [k for _, _, batch_keys in loader for k in batch_keys]
    assert sorted(keys) == [f"bad.tar/{i:02d}" for i in range(12) if i not in (4, 7)]
    assert loader.stats.skipped == 2 and sum(loader.stats.errors.values()) == 2
    assert loader.state_dict()["consumed"] == [[0, 12]]  # a skipped sample is not read again on resume


@pytest.mark.parametrize("where", ["actors", "trainer"])
def test_a_bad_sample_raises_its_sample_error_under_raise(cluster, damaged_shard, where):
    """In the trainer, as a SampleError naming the shard and key (from an actor, Ray's
    error is also an instance of it)."""
    if where == "actors":
        rows = tray.read(damaged_shard, seed=SEED, epoch=EPOCH, transform=transform(), decoders=1)
        loader = tray.loader(rows, batch_size=12)
    else:
        loader = tray.loader(tray.read(damaged_shard, seed=SEED, epoch=EPOCH), batch_size=12, data=damaged_shard,
                             transform=transform(), seed=SEED, epoch=EPOCH)
    with pytest.raises(SampleError, match=r"bad.tar/(04|07)"):
        list(loader)


def test_data_changed_after_the_epoch_was_cut_is_a_storage_error(cluster, tmp_path):
    """A shard rewritten between read() and the first batch: positions would name other
    samples, so the trainer gets a StorageError, not another sample's pixels."""
    path = tmp_path / "one.tar"
    def shard(labels):
        members = []
        for i, label in enumerate(labels):
            image = encode(photo(40, 50, seed=i), quality=90)
            members += [(f"{i:02d}.jpg", image), (f"{i:02d}.cls", str(label).encode())]
        write_tar(str(path), members)

    shard(range(8))
    rows = tray.read(str(path), seed=SEED, epoch=EPOCH)
    shard(range(1, 9))  # the same images, other labels
    loader = tray.loader(rows, batch_size=4, data=str(path), transform=transform(), seed=SEED, epoch=EPOCH)
    with pytest.raises(StorageError, match="the data changed since turbofeed.ray.read"):
        list(loader)
