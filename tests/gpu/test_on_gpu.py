"""Real GPU checks: nvJPEG batched decode and the gpu_decode loader on a CUDA device."""

from __future__ import annotations

import gc
import tarfile

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import decode
from turbofeed.decode.gpu import GpuDecoder, find_backend
from turbofeed.torch.multi_gpu import MultiGpuTransfer

if find_backend()[0] is None:
    pytest.skip(f"no GPU decoder: {find_backend()[1]}", allow_module_level=True)


def on_the_gpu(stats, decoder) -> None:
    """No image fell back to the CPU and the decoder's calls never failed: the figures
    and pixels under test are the GPU's (a full CPU fallback passes every other check)."""
    assert not stats.errors.get("gpu_fallback"), stats.errors
    assert isinstance(decoder, GpuDecoder), decoder  # not None: the CPU path after one warning
    assert decoder.failures.total == 0, decoder.failures.as_dict()


# nvJPEG's IDCT and chroma upsampling are not libjpeg-turbo's: on an H100 (torchvision 0.26,
# CUDA 13) the mean difference of an ImageNet-like photo was 1.75 levels of 255. A wrong
# decode (another image, swapped channels, grey) is tens of levels off.
NVJPEG_MEAN_DIFF = 2.5


def test_batched_nvjpeg_matches_libjpeg_turbo(shard_paths):
    with tarfile.open(shard_paths[0]) as tar:
        datas = [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".jpg")][:32]
    decoder = GpuDecoder("cuda")
    decoded = decoder.decode(datas)
    assert len(decoded) == len(datas) == 32 and decoder.failures.total == 0, decoder.failures.as_dict()
    for data, image in zip(datas, decoded):
        ref = decode(data).transpose(2, 0, 1)
        assert image is not None and image.is_cuda and tuple(image.shape) == ref.shape
        assert np.abs(image.cpu().numpy().astype(int) - ref).mean() < NVJPEG_MEAN_DIFF


def test_empty_and_rubbish_data_come_back_none_and_the_rest_decode(shard_paths):
    """Zero bytes must not reach torch.frombuffer (it raises), rubbish must not lose the batch."""
    with tarfile.open(shard_paths[0]) as tar:
        good = [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".jpg")][:2]
    out = GpuDecoder("cuda").decode([good[0], b"", b"not a jpeg", good[1]])
    assert out[1] is None and out[2] is None
    assert out[0] is not None and out[3] is not None and out[0].is_cuda


def test_the_decoder_names_its_device_with_an_index():
    """torchvision keeps one process-wide decoder and re-creates it (leaking nvJPEG buffers)
    whenever the device differs: "cuda" and "cuda:0" must not alternate."""
    assert GpuDecoder("cuda").device == GpuDecoder("cuda:0").device == torch.device("cuda", 0)


@pytest.mark.parametrize("backend", ["torchvision", "nvimgcodec"])
def test_each_installed_backend_starts_and_decodes(shard_paths, backend):
    """nvImageCodec 0.7+ renamed ColorSpec.RGB to SRGB: the backend must still start."""
    if find_backend(backend)[0] is None:
        pytest.skip(f"{backend}: {find_backend(backend)[1]}")
    with tarfile.open(shard_paths[0]) as tar:
        datas = [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".jpg")][:4]
    decoder = GpuDecoder("cuda", backend=backend)
    assert decoder.backend == backend and decoder.description.startswith(f"{backend} on ")
    images = decoder.decode(datas)
    assert decoder.failures.total == 0, decoder.failures.as_dict()
    for data, image in zip(datas, images):
        ref = decode(data).transpose(2, 0, 1)
        assert image is not None and image.is_cuda and tuple(image.shape) == ref.shape
        assert np.abs(image.cpu().numpy().astype(int) - ref).mean() < NVJPEG_MEAN_DIFF


def test_cmyk_is_decoded_on_the_cpu(odd_images, tmp_path, tar_writer):
    path = tar_writer(str(tmp_path / "c.tar"), [("a.jpg", odd_images["cmyk"]), ("b.jpg", odd_images["rgb"])])
    loader = turbofeed.DataLoader(path, batch_size=2, gpu_decode=True, transform=T.imagenet_eval(32))
    images, _ = next(iter(loader))
    assert images.is_cuda and images.shape == (2, 3, 32, 32)
    assert loader.stats.errors == {"gpu_fallback": 1}  # the CMYK one: never sent, so no decoder failure
    assert loader._gpu_decoder.failures.total == 0


def test_gpu_loader_matches_cpu_loader(shards):
    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=3, transform=T.imagenet_train(64, normalize=True))
    loader = turbofeed.DataLoader(shards, gpu_decode=True, **kw)
    gpu = [x for x, _ in loader]
    cpu = [x for x, _ in turbofeed.DataLoader(shards, **kw)]
    on_the_gpu(loader.stats, loader._gpu_decoder)
    assert len(gpu) == len(cpu) == 8
    for g, c in zip(gpu, cpu):
        assert g.is_cuda and g.shape == c.shape
        assert (g.cpu() - c).abs().mean() < 0.05  # normalised units; ~1 level of 8 bits is 0.017


def test_gpu_feed_per_chunk_gives_the_per_sample_feed_bits(shards, monkeypatch):
    """The per-chunk feed (chunk buffers, decode_tensors, resize_packed's gather)
    against the per-sample feed (decode of bytes, resize_batch): same decoder, same bits."""
    from turbofeed.engine import choose
    from turbofeed.engine.gpu_chunks import ChunkedGpuDecode

    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=3, transform=T.imagenet_train(64, normalize=True),
              return_keys=True)
    loader = turbofeed.DataLoader(shards, gpu_decode=True, **kw)
    it = iter(loader)
    assert isinstance(it.engine.decode, ChunkedGpuDecode)
    chunked = [(x.cpu(), y.cpu(), k) for x, y, k in it]
    on_the_gpu(loader.stats, loader._gpu_decoder)
    monkeypatch.setattr(choose, "chunked", lambda *a, **k: False)
    per_sample = [(x.cpu(), y.cpu(), k) for x, y, k in turbofeed.DataLoader(shards, gpu_decode=True, **kw)]
    assert len(chunked) == len(per_sample)
    for (x, y, k), (x2, y2, k2) in zip(chunked, per_sample):
        assert k == k2 and torch.equal(y, y2) and torch.equal(x, x2)


def test_the_same_batch_decoded_200_times_is_right_every_time(shard_paths):
    """The reproducer of nvJPEG's batched-decode race on H100 (torchvision PR #9606:
    outputs written into blocks the caller's stream still used): the same batch through
    the GPU loader 200 times, while the resize of one batch overlaps the decode of the
    next, each time within nvJPEG's distance of the CPU loader's pixels."""
    kw = dict(batch_size=40, num_workers=2, shuffle=False, transform=T.imagenet_eval(64))
    want = torch.cat([x for x, _ in turbofeed.DataLoader(shard_paths[0], **kw)])
    loader = turbofeed.DataLoader(shard_paths[0], gpu_decode=True, **kw)
    bad = []
    for epoch in range(200):
        got = torch.cat([x.cpu() for x, _ in loader])
        diff = (got.float() - want.float()).abs().mean().item()
        if not diff < NVJPEG_MEAN_DIFF:
            bad.append((epoch, diff))
    assert not bad
    on_the_gpu(loader.stats, loader._gpu_decoder)


def test_hybrid_loader_matches_cpu_loader_and_splits_every_batch(shards):
    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=3, transform=T.imagenet_train(64, normalize=True),
              return_keys=True)
    loader = turbofeed.DataLoader(shards, gpu_decode=True, hybrid=True, **kw)
    hybrid = [(x, y, k) for x, y, k in loader]
    cpu = [(x, y, k) for x, y, k in turbofeed.DataLoader(shards, **kw)]
    on_the_gpu(loader.stats, loader._gpu_decoder)
    assert [k for *_, k in hybrid] == [k for *_, k in cpu] and len(hybrid) == 8
    for (g, gy, _), (c, cy, _) in zip(hybrid, cpu):
        assert g.is_cuda and g.shape == c.shape and torch.equal(gy.cpu(), cy)
        assert (g.cpu() - c).abs().mean() < 0.05
    assert 0.0 < loader.hybrid_share < 1.0


def test_pipeline_decodes_on_the_gpu(shards):
    kw = dict(num_workers=2, shuffle=True, seed=3, transform=T.imagenet_train(64))
    with turbofeed.Pipeline(shards, gpu_decode=True, device_id=0, **kw) as pipe:
        gpu = pipe.next_batch(40)
        on_the_gpu(pipe.stats, pipe.decoder)
    with turbofeed.Pipeline(shards, **kw) as pipe:
        cpu = pipe.next_batch(40)
    assert [s.key for s in gpu] == [s.key for s in cpu] and len(gpu) == 40
    for g, c in zip(gpu, cpu):
        tensor = g.get_gpu_tensor()
        assert tensor is g.tensor and tensor.is_cuda and tuple(tensor.shape) == (64, 64, 3)
        assert np.abs(g.get_image().astype(int) - c.get_image()).mean() < 1.5


def test_memory_does_not_grow_over_epochs(shards):
    """Nothing of an epoch outlives it: the memory held between epochs stays the same. (An
    epoch's peak depends on which images the shuffle puts together, so peaks are not compared.)"""
    loader = turbofeed.DataLoader(shards, batch_size=16, gpu_decode=True, transform=T.imagenet_train(64))
    held = []
    for epoch in range(4):
        for _ in loader:
            pass
        torch.cuda.synchronize()
        gc.collect()
        held.append(torch.cuda.memory_allocated())
    on_the_gpu(loader.stats, loader._gpu_decoder)
    assert held[3] <= held[1] + 2**20, [f"{h / 2**20:.1f} MiB" for h in held]


def test_peer_copies():
    x = torch.arange(10, device="cuda:0")
    assert MultiGpuTransfer.can_access_peer(0, 0)
    if torch.cuda.device_count() > 1:
        assert torch.equal(MultiGpuTransfer.gpu_to_gpu(x, "cuda:1").cpu(), x.cpu())
