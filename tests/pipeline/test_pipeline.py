"""turbofeed.Pipeline: the sample-level API (start / next_batch(n) / stop)."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest
import torch

import turbofeed
from turbofeed.decode import decode


def test_next_batch_walks_the_epoch_in_storage_order(shard_paths):
    pipe = turbofeed.Pipeline(tar_paths=shard_paths, num_workers=2, decode_jpeg=True)
    pipe.start()
    sizes, keys = [], []
    while batch := pipe.next_batch(50):
        sizes.append(len(batch))
        keys += [s.key for s in batch]
    assert pipe.next_batch(5) == []  # stays at the end of the epoch
    pipe.stop()
    assert sizes == [50, 50, 20]
    assert keys == [f"{i:08d}" for i in range(120)]  # make-dataset keys, in tar order
    assert [s.key for s in pipe.next_batch(5)] == keys[:5]  # after stop: the epoch starts over
    pipe.stop()


def test_samples_carry_image_label_key_and_shard(shard_paths):
    with tarfile.open(shard_paths[0]) as tar:
        jpg = tar.extractfile("00000003.jpg").read()
        cls = int(tar.extractfile("00000003.cls").read())
    with turbofeed.Pipeline(shard_paths[0], num_workers=2) as pipe:
        s = pipe.next_batch(4)[3]
    assert (s.key, s.label, s.shard) == ("00000003", cls, shard_paths[0])
    img = s.get_image()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    assert np.array_equal(img, decode(jpg))


def test_without_decoding_samples_hold_the_exact_bytes(shard_paths):
    with tarfile.open(shard_paths[1]) as tar:
        jpg = tar.extractfile("00000040.jpg").read()
    with turbofeed.Pipeline(shard_paths[1], num_workers=2, decode_jpeg=False) as pipe:
        s = pipe.next_batch(1)[0]
    assert s.image is None and s.data == jpg
    assert np.array_equal(s.get_image(), decode(jpg))


def test_shuffle_is_a_function_of_seed_and_epoch(shards):
    def order(seed, epoch):
        pipe = turbofeed.Pipeline(shards, num_workers=2, decode_jpeg=False, shuffle=True, seed=seed)
        pipe.set_epoch(epoch)
        keys = [s.key for s in pipe]
        pipe.stop()
        return keys

    a = order(0, 0)
    assert a == order(0, 0) and sorted(a) == [f"{i:08d}" for i in range(120)]
    assert a != order(0, 1) and a != order(1, 0)


def test_ranks_get_disjoint_strided_shares(shards):
    shares = []
    for rank in range(2):
        with turbofeed.Pipeline(shards, num_workers=2, decode_jpeg=False, rank=rank, world_size=2) as p:
            shares.append([s.key for s in p])
            assert len(p) == 60
    assert shares[0][:3] == ["00000000", "00000002", "00000004"]
    assert not set(shares[0]) & set(shares[1]) and len(shares[0]) == len(shares[1]) == 60


def test_transform_in_pipeline(shards):
    from turbofeed import transforms as T

    with turbofeed.Pipeline(shards, num_workers=2, transform=T.imagenet_train(48)) as pipe:
        imgs = [s.get_image() for s in pipe.next_batch(6)]
    assert all(i.shape == (48, 48, 3) and i.dtype == np.uint8 for i in imgs)


def test_gpu_tensor_needs_a_gpu(shards):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with turbofeed.Pipeline(shards, num_workers=1) as pipe:
        s = pipe.next_batch(1)[0]
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        s.get_gpu_tensor()
