"""gpu_decode through the DataLoader. The nvJPEG decoder itself needs a GPU; everything
around it (threads reading bytes and windows, one batched decode call, CPU fallback for
rejected images, bad-sample policy, batched augmentation) runs here with a stand-in
decoder that decodes on the CPU into tensors, because no GPU exists on this machine."""

from __future__ import annotations

import pytest
import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode.gpu import GpuDecodeUnavailable, GpuDecoder, find_backend


def batches(loader):
    return [(x.clone(), y.clone(), k) for x, y, k in loader]


def test_gpu_path_matches_the_cpu_path(shards, stand_in):
    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=2, transform=T.imagenet_train(48), return_keys=True)
    gpu = batches(turbofeed.DataLoader(shards, gpu_decode=stand_in, **kw))
    cpu = batches(turbofeed.DataLoader(shards, **kw))
    assert stand_in.calls == [16] * 7 + [8]  # one decode call per batch
    assert [k for _, _, k in gpu] == [k for _, _, k in cpu]
    for (gx, gy, _), (cx, cy, _) in zip(gpu, cpu):
        assert torch.equal(gy, cy) and gx.dtype == cx.dtype == torch.uint8 and gx.shape == cx.shape
        assert (gx.int() - cx.int()).abs().max() <= 1


def test_rejected_images_fall_back_to_the_cpu_and_bad_ones_are_replaced(tmp_path, odd_images, tar_writer,
                                                                         stand_in):
    members = []
    for i, kind in enumerate(["rgb", "cmyk", "rgb", "truncated", "gray", "progressive"]):
        members += [(f"k{i}.jpg", odd_images[kind]), (f"k{i}.cls", str(i).encode())]
    path = tar_writer(str(tmp_path / "mixed.tar"), members)
    loader = turbofeed.DataLoader(path, batch_size=6, num_workers=2, gpu_decode=stand_in,
                                  transform=T.imagenet_eval(32, normalize=True), return_keys=True)
    images, labels, keys = next(iter(loader))
    assert images.shape == (6, 3, 32, 32) and images.dtype == torch.float32
    assert labels.tolist() == [0, 1, 2, 4, 4, 5]  # k3 (truncated) replaced by the next good sample
    assert keys[3] == "mixed.tar/k4"
    assert loader.stats.errors["gpu_fallback"] == 1  # CMYK was refused by the decoder
    # the truncated one never reached it: its scan is checked on the CPU first
    assert loader.stats.replaced == 1 and loader.stats.errors["decode.gpu"] == 1


def test_without_a_gpu_gpu_decode_true_warns_once_and_uses_the_cpu(shards):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    backend, reason = find_backend()
    assert backend is None and "no CUDA GPU" in reason
    with pytest.raises(GpuDecodeUnavailable, match="no CUDA GPU"):
        GpuDecoder()
    with pytest.warns(RuntimeWarning, match="no CUDA GPU visible to PyTorch; decoding on the CPU"):
        loader = turbofeed.DataLoader(shards, batch_size=60, gpu_decode=True, transform=T.imagenet_eval(32))
    assert [len(x) for x, _ in loader] == [60, 60]
    assert loader.stats.errors == {"gpu_fallback": 1}


def test_gpu_decode_needs_a_fixed_output_size(shards, stand_in):
    with pytest.warns(RuntimeWarning, match="fixed output size"):
        turbofeed.DataLoader(shards, gpu_decode=stand_in)
