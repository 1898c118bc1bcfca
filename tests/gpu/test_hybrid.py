"""Hybrid decode: each batch split between the GPU decoder and the CPU threads in
proportion to measured speed. The split logic and the batch assembly are device-agnostic;
they run here with a stand-in decoder that decodes on the CPU into tensors (no GPU
exists on this machine: the ``stand_in`` fixture of conftest.py), slowed down where a
test needs a "GPU" of known speed."""

from __future__ import annotations

import pytest
import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.engine.hybrid import HybridSplit


def test_split_follows_the_measured_rates():
    split = HybridSplit(cpu_threads=4)
    assert split.gpu_count(64) == 32  # nothing measured yet: half and half
    split.add_gpu(0.064, 64)          # GPU: 1 ms per image -> 1000 images/s
    for _ in range(8):
        split.add_cpu(0.012)          # one CPU thread: 12 ms per image; 4 threads -> 333/s
    assert split.gpu_share() == pytest.approx(1000 / (1000 + 4 / 0.012))
    assert split.gpu_count(64) == round(64 * 0.75)
    for _ in range(40):               # the GPU slows down 10x (another job on it)
        split.add_gpu(0.64, 64)
    assert split.gpu_share() == pytest.approx(100 / (100 + 4 / 0.012), rel=1e-3)


def test_each_side_keeps_at_least_one_sample_so_both_stay_measured():
    split = HybridSplit(cpu_threads=1)
    split.add_gpu(1e-6, 1)
    split.add_cpu(10.0)
    assert split.gpu_count(64) == 63 and split.gpu_count(1) == 1
    split = HybridSplit(cpu_threads=1)
    split.add_gpu(10.0, 1)
    split.add_cpu(1e-6)
    assert split.gpu_count(64) == 1 and split.gpu_count(1) == 0


@pytest.mark.parametrize("transform", [T.imagenet_train(48), T.imagenet_eval(40, normalize=True)])
def test_hybrid_batches_equal_the_cpu_path(shards, transform, stand_in):
    """Same keys, labels and order as the CPU loader; pixels within one level (float:
    within one level's worth after normalisation); every batch split between both sides."""
    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=5, transform=transform, return_keys=True)
    decoder = stand_in
    hybrid = turbofeed.DataLoader(shards, gpu_decode=decoder, hybrid=True, **kw)
    cpu = turbofeed.DataLoader(shards, **kw)
    got = [(x.clone(), y.clone(), k) for x, y, k in hybrid]
    want = [(x.clone(), y.clone(), k) for x, y, k in cpu]
    assert [k for *_, k in got] == [k for *_, k in want]
    # one 8-bit level; after normalisation that is 1 / (255 * std)
    level = 1.0 if transform.output is None else 1.01 / (255 * min(T.IMAGENET_STD))
    for (gx, gy, _), (cx, cy, _) in zip(got, want):
        assert torch.equal(gy, cy) and gx.dtype == cx.dtype and gx.shape == cx.shape
        assert (gx.double() - cx.double()).abs().max() <= level
    assert len(decoder.calls) == len(want)  # one GPU call per batch
    # both sides worked on every full batch (the split is set for full batches; a short
    # last batch may fall to one side)
    assert all(0 < n < 16 for n in decoder.calls[:-1])
    assert 0.0 < hybrid.hybrid_share < 1.0


def test_a_slow_gpu_gets_a_smaller_share(shards, stand_in):
    """A stand-in "GPU" 20 ms per image, far slower than the CPU threads on 48 px crops:
    after the first batches the split moves most of each batch to the CPU."""
    decoder = stand_in
    decoder.seconds_per_image = 0.02
    loader = turbofeed.DataLoader(shards, batch_size=20, num_workers=2, gpu_decode=decoder, hybrid=True,
                                  transform=T.imagenet_train(48))
    labels = [y for _, y in loader]
    assert sum(len(y) for y in labels) == loader.num_samples
    assert decoder.calls[0] == 10  # half of the first batch, before anything was timed
    assert decoder.calls[-1] < 5 and loader.hybrid_share < 0.25


def test_skipped_samples_leave_both_parts_consistent(tmp_path, odd_images, tar_writer, stand_in):
    """on_error="skip": a corrupt image on either side is dropped; the others keep their
    order and labels."""
    kinds = ["rgb", "truncated", "rgb", "gray", "progressive", "truncated", "rgb", "gray"]
    members = []
    for i, kind in enumerate(kinds):
        members += [(f"k{i}.jpg", odd_images[kind]), (f"k{i}.cls", str(i).encode())]
    path = tar_writer(str(tmp_path / "mixed.tar"), members)
    loader = turbofeed.DataLoader(path, batch_size=8, num_workers=2, gpu_decode=stand_in, hybrid=True,
                                  on_error="skip", transform=T.imagenet_eval(32), return_keys=True)
    images, labels, keys = next(iter(loader))
    assert labels.tolist() == [0, 2, 3, 4, 6, 7]
    assert keys == [f"mixed.tar/k{i}" for i in (0, 2, 3, 4, 6, 7)]
    assert images.shape == (6, 3, 32, 32) and images.dtype == torch.uint8
    assert loader.stats.skipped == 2


def test_bfloat16_output_on_every_path(shards, stand_in):
    """Normalize(dtype="bfloat16"): the CPU path (float32 host slots, cast on delivery),
    the GPU path and the hybrid path all deliver bfloat16 equal to the float32 batches
    rounded to bfloat16 (GPU paths within one 8-bit level before rounding)."""
    def recipe(dtype):
        return T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.Normalize(dtype=dtype)])

    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=9)
    reference = [x for x, _ in turbofeed.DataLoader(shards, transform=recipe("float32"), **kw)]
    level = 1.01 / (255 * min(T.IMAGENET_STD))
    for extra in ({}, {"gpu_decode": stand_in}, {"gpu_decode": stand_in, "hybrid": True}):
        got = [x for x, _ in turbofeed.DataLoader(shards, transform=recipe("bfloat16"), **kw, **extra)]
        assert len(got) == len(reference)
        for g, r in zip(got, reference):
            assert g.dtype == torch.bfloat16 and g.shape == r.shape
            if not extra:
                assert torch.equal(g, r.to(torch.bfloat16))
            else:  # bfloat16 keeps 8 bits of mantissa: |x| < 2.7 rounds by at most 2^-7 * 2.7
                assert (g.float() - r).abs().max() <= level + 2.7 / 128


def test_hybrid_channels_last_batches(shards, stand_in):
    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=2, transform=T.imagenet_train(32), channels_last=True)
    hybrid = [x for x, _ in turbofeed.DataLoader(shards, gpu_decode=stand_in, hybrid=True, **kw)]
    cpu = [x for x, _ in turbofeed.DataLoader(shards, **kw)]
    for h, c in zip(hybrid, cpu):
        assert h.shape == c.shape == (len(c), 3, 32, 32)
        assert h.is_contiguous(memory_format=torch.channels_last)
        assert (h.int() - c.int()).abs().max() <= 1
