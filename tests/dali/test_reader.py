"""turbofeed.dali.reader in real DALI CPU pipelines (``device_id=None``: no GPU needed) over
real tar shards: every sample once with the DataLoader's labels and bytes, shards
disjoint and equal, DALI's checkpoints resuming exactly, a new order after reset."""

from __future__ import annotations

import os
import tarfile

import numpy as np
import pytest

from builders import small_jpeg, write_tar
from resume_check import DALI, check_resume, dali_epoch
from turbofeed.dali import DALI_FIX

pytest.importorskip("nvidia.dali", reason=f"NVIDIA DALI is not installed: {DALI_FIX}")

from nvidia.dali import fn, pipeline_def  # noqa: E402

import turbofeed  # noqa: E402
import turbofeed.dali as tdali  # noqa: E402


def build(data, batch_size=8, checkpoint=None, decode=False, **options):
    """A CPU pipeline: (data or decoded images, labels, keys) from the reader."""

    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, enable_checkpointing=True,
                  checkpoint=checkpoint)
    def pipe():
        data_node, labels, keys = tdali.reader(data, return_keys=True, **options)
        if decode:
            data_node = fn.resize(fn.decoders.image(data_node, device="cpu"), size=(16, 16))
        return data_node, labels, keys

    p = pipe()
    p.build()
    return p


def run_epoch(pipe):
    """[(keys, labels, data)] of each batch until StopIteration."""
    return list(dali_epoch(pipe))


def members(shard_paths) -> dict[str, bytes]:
    """``shard/key`` -> the jpg bytes, read by tarfile (not turbofeed)."""
    out = {}
    for path in shard_paths:
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if m.name.endswith(".jpg"):
                    out[f"{os.path.basename(path)}/{m.name[:-4]}"] = tar.extractfile(m).read()
    return out


def test_epoch_gives_every_sample_once_with_the_loaders_labels_and_bytes(shards, shard_paths):
    batches = run_epoch(build(shards, shuffle=True, seed=3))
    keys = [k for b in batches for k in b[0]]
    stored = members(shard_paths)
    assert sorted(keys) == sorted(stored) and len(keys) == 120
    assert [len(b[0]) for b in batches] == [8] * 15
    loader = turbofeed.DataLoader(shards, batch_size=16, num_workers=2, return_keys=True)
    expected = {k: int(label) for _, labels, ks in loader for k, label in zip(ks, labels)}
    got = {k: label for b in batches for k, label in zip(b[0], b[1])}
    assert got == expected
    assert all(bytes(d) == stored[k] for b in batches for k, d in zip(b[0], b[2]))


def test_order_is_the_dataloaders(shards):
    """Same seed and epoch, same shard split: the same samples in the same order as the DataLoader."""
    got = [k for b in run_epoch(build(shards, shuffle=True, seed=5, shard_id=1, num_shards=2)) for k in b[0]]
    loader = turbofeed.DataLoader(shards, batch_size=8, num_workers=2, return_keys=True, shuffle=True, seed=5,
                                  rank=1, world_size=2)
    assert got == [k for _, _, ks in loader for k in ks]


def test_two_shards_are_disjoint_and_equal(shards):
    parts = [[k for b in run_epoch(build(shards, shuffle=True, shard_id=s, num_shards=2)) for k in b[0]]
             for s in (0, 1)]
    assert len(parts[0]) == len(parts[1]) == 60
    assert not set(parts[0]) & set(parts[1])
    assert len(set(parts[0]) | set(parts[1])) == 120


def test_shards_default_to_the_launchers_ranks(shards, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    from_env = [k for b in run_epoch(build(shards, shuffle=True)) for k in b[0]]
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    explicit = [k for b in run_epoch(build(shards, shuffle=True, shard_id=1, num_shards=2)) for k in b[0]]
    assert from_env == explicit and len(explicit) == 60


@pytest.mark.parametrize("given, missing", [({"shard_id": 1}, "num_shards"), ({"num_shards": 2}, "shard_id")])
def test_shard_id_or_num_shards_alone_is_refused_as_the_loaders_rank(shards, given, missing):
    """The same one-line refusal as the DataLoader's half-given rank/world_size (issue 37 #3)."""
    with pytest.raises(ValueError, match=f"given without {missing}: give both shard_id and num_shards"):
        build(shards, **given)


def test_uneven_shards_pad_to_equal_batch_counts(shards):
    """120 samples on 7 shards: 18 each (wrap-around padding, as the DataLoader's ranks)."""
    counts = [sum(len(b[0]) for b in run_epoch(build(shards, shard_id=s, num_shards=7))) for s in range(7)]
    assert counts == [18] * 7


def test_checkpoint_after_7_batches_restores_the_uninterrupted_run(shards):
    """After 7 batches (DALI has prefetched beyond them by then), at the epoch's end (its
    resumed pipeline ends that epoch first) and 7 batches into the next."""
    result = check_resume(lambda checkpoint=None: build(shards, shuffle=True, seed=1, checkpoint=checkpoint),
                          stops=[7, 15, 22], epochs=2, kind=DALI)
    assert [len(e) for e in result.epochs] == [15, 15]


def test_reset_gives_a_new_order_of_the_same_samples(shards):
    pipe = build(shards, shuffle=True, seed=0)
    first = [k for b in run_epoch(pipe) for k in b[0]]
    second = [k for b in run_epoch(pipe) for k in b[0]]
    assert first != second and sorted(first) == sorted(second)


def test_drop_last_and_partial_last_batch(shards):
    assert [len(b[0]) for b in run_epoch(build(shards, batch_size=50))] == [50, 50, 20]
    assert [len(b[0]) for b in run_epoch(build(shards, batch_size=50, drop_last=True))] == [50, 50]


def test_decoded_downstream_with_dali_generic_iterator(shards):
    pytest.importorskip("torch")
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    it = DALIGenericIterator([build(shards, batch_size=16, decode=True, shuffle=True)], ["images", "labels", "keys"])
    seen, shapes = 0, set()
    for (batch,) in it:
        seen += batch["images"].shape[0]
        shapes.add(tuple(batch["images"].shape[1:]))
        assert batch["labels"].dtype.is_floating_point is False
    assert seen == 120 and shapes == {(16, 16, 3)}


def test_fields_one_output_per_field(shards, shard_paths):
    @pipeline_def(batch_size=10, num_threads=2, device_id=None)
    def pipe():
        image, cls = tdali.reader(shards, fields={"image": "jpg", "label": "cls"})
        return image, cls

    p = pipe()
    stored = members(shard_paths)
    images, labels = p.run()
    assert len(images) == 10
    first_shard = os.path.basename(shard_paths[0])
    with tarfile.open(shard_paths[0]) as tar:
        cls = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith(".cls"))).read()
    assert bytes(np.array(images[0])) == stored[f"{first_shard}/00000000"]
    assert bytes(np.array(labels[0])) == cls


def test_int32_labels(shards):
    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        jpegs, labels = tdali.reader(shards, label_dtype=np.int32)
        return jpegs, labels

    _, labels = pipe().run()
    assert np.array(labels[0]).dtype == np.int32 and np.array(labels[0]).shape == (1,)


def test_bad_sample_is_replaced_by_the_next_good_one(tmp_path):
    """A sample whose label does not parse: "replace" fills its slot with the next good
    sample (the batch keeps its size), "raise" names shard and key."""
    members_ = [(f"{i:03d}.jpg", small_jpeg(i)) for i in range(6)]
    members_ += [(f"{i:03d}.cls", b"%d" % i) for i in range(6) if i != 2] + [("002.cls", b"not-a-number")]
    path = write_tar(str(tmp_path / "bad.tar"), sorted(members_))

    batches = run_epoch(build(path, batch_size=3))
    keys = [k for b in batches for k in b[0]]
    assert keys == ["bad.tar/000", "bad.tar/001", "bad.tar/003", "bad.tar/003", "bad.tar/004", "bad.tar/005"]
    with pytest.raises(turbofeed.SampleError, match="bad.tar/002: bad .cls label"):
        run_epoch(build(path, batch_size=3, on_error="raise"))


def test_outside_a_pipeline_definition_says_so(shards):
    with pytest.raises(RuntimeError, match="inside a DALI pipeline"):
        tdali.reader(shards)


def test_s3_shards_on_a_local_server(tmp_path):
    """``s3://`` shards (moto on 127.0.0.1) through the node cache: every sample once."""
    pytest.importorskip("moto", reason="moto[server] is the local S3 server: pip install 'turbofeed[test]'")
    pytest.importorskip("boto3", reason="boto3 uploads the test shards: pip install 'turbofeed[test]'")
    from builders import upload_shards
    from turbofeed.io.stores.urls import close_clients
    from turbofeed.testing import LocalS3Server

    with LocalS3Server() as server:
        data = upload_shards(server.endpoint, "s3://dali-shards/train/", shards=3, per_shard=10)
        s3 = turbofeed.S3Config(endpoint_url=server.endpoint, access_key_id="test", secret_access_key="test",
                                region="us-east-1")
        try:
            batches = run_epoch(build("s3://dali-shards/train/", batch_size=8, shuffle=True, storage=s3,
                                      cache_dir=str(tmp_path)))
        finally:
            close_clients()
    keys = [k.rsplit("/", 1)[1] for b in batches for k in b[0]]
    assert sorted(keys) == sorted(data["keys"])
    assert all(label == int(k[1:3]) % 4 for b in batches for k, label in zip((k.rsplit("/", 1)[1] for k in b[0]), b[1]))


def test_an_image_folder_and_a_dataset_object(image_folder):
    loader = turbofeed.DataLoader(image_folder, batch_size=30, num_workers=1, return_keys=True)
    expected = {k: int(label) for _, labels, ks in loader for k, label in zip(ks, labels)}
    got = {k: label for b in run_epoch(build(image_folder, batch_size=7)) for k, label in zip(b[0], b[1])}
    assert got == expected and len(got) == 30
    dataset = turbofeed.io.IndexedDataset(image_folder)
    got = {k: label for b in run_epoch(build(dataset, batch_size=7)) for k, label in zip(b[0], b[1])}
    assert got == expected


def test_read_threads_stop_when_dali_drops_the_pipeline(shards):
    """The reader's pass threads (the engine's, named after its fetch stage) hold what
    they read with, not the reader: dropping the pipeline stops them."""
    import gc
    import threading
    import time

    before = set(threading.enumerate())
    pipe = build(shards, threads=2)
    pipe.run()
    started = [t for t in set(threading.enumerate()) - before if t.name.startswith("turbofeed-fetch-")]
    assert len(started) == 2
    del pipe
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in started) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert not any(t.is_alive() for t in started)
