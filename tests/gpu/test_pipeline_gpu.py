"""gpu_decode through turbofeed.Pipeline. Everything around the decoder (threads reading
bytes and windows, one decode call per chunk, batched transforms, CPU fallback, the
bad-sample policy, tensors handed out without a host round trip) runs here with the CPU
stand-in decoder of conftest.py; the real nvJPEG path is in test_on_gpu.py."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import decode

# 1 level of 8 bits in ImageNet-normalised units (the smallest std gives the largest step)
ONE_LEVEL = 1.001 / (min(T.IMAGENET_STD) * 255)


def run(pipe) -> list:
    with pipe:
        return list(pipe)


def test_without_a_transform_samples_are_the_decoders_own_tensors(shards, stand_in):
    kw = dict(num_workers=2, shuffle=True, seed=2)
    gpu = run(turbofeed.Pipeline(shards, gpu_decode=stand_in, **kw))
    cpu = run(turbofeed.Pipeline(shards, **kw))
    assert stand_in.calls == [32, 32, 32, 24]  # one decode call per chunk of 32
    assert [(s.key, s.label, s.shard) for s in gpu] == [(s.key, s.label, s.shard) for s in cpu]
    made = {t.data_ptr() for t in stand_in.outputs}
    for g, c in zip(gpu, cpu):
        tensor = g.get_gpu_tensor()
        assert tensor is g.tensor and tensor.dtype == torch.uint8 and tensor.shape == c.get_image().shape
        assert tensor.data_ptr() in made  # a view of what the decoder returned: no copy anywhere
        assert g.image is None and np.array_equal(g.get_image(), c.get_image())


@pytest.mark.parametrize("transform", [T.imagenet_train(48), T.imagenet_eval(48), T.Compose([T.Resize(40)]),
                                       T.imagenet_eval(40, normalize=True)],
                         ids=["train", "eval", "resize-only", "normalize"])
def test_with_a_transform_pixels_match_the_cpu_path(shards, stand_in, transform):
    kw = dict(num_workers=2, shuffle=True, seed=5, transform=transform)
    gpu = run(turbofeed.Pipeline(shards, gpu_decode=stand_in, **kw))
    cpu = run(turbofeed.Pipeline(shards, **kw))
    assert stand_in.calls == [32, 32, 32, 24]
    assert [(s.key, s.label) for s in gpu] == [(s.key, s.label) for s in cpu]
    tolerance = 1 if transform.output is None else ONE_LEVEL
    for g, c in zip(gpu, cpu):
        image, ref = g.get_image(), c.get_image()
        assert image.shape == ref.shape and image.dtype == ref.dtype
        assert np.abs(image.astype(np.float64) - ref).max() <= tolerance
    if transform.size is not None:  # a chunk is resized in one batched op: one output for all 32
        tensors = [s.get_gpu_tensor() for s in gpu[:32]]  # held, so no address is reused
        assert all(t is s.tensor for t, s in zip(tensors, gpu)) and tensors[0].shape == (*transform.size, 3)
        assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1
    else:
        assert len({s.get_image().shape for s in gpu}) > 1  # sizes vary: grouped by size


def test_pre_decoded_arrays_skip_the_decoder(array_dataset, fixed_images, stand_in):
    samples = run(turbofeed.Pipeline(array_dataset("npy"), num_workers=2, gpu_decode=stand_in))
    assert stand_in.calls == [] and len(samples) == 48
    assert np.array_equal(np.stack([s.get_gpu_tensor().numpy() for s in samples]), fixed_images["pixels"])


def mixed_tar(tmp_path, odd_images, tar_writer):
    members = []
    for i, kind in enumerate(["rgb", "cmyk", "rgb", "truncated", "gray", "progressive"]):
        members += [(f"k{i}.jpg", odd_images[kind]), (f"k{i}.cls", str(i).encode())]
    return tar_writer(str(tmp_path / "mixed.tar"), members)


@pytest.mark.parametrize("transform", [None, T.imagenet_eval(32)], ids=["full", "eval"])
def test_refused_images_fall_back_and_bad_ones_are_replaced(tmp_path, odd_images, tar_writer, stand_in,
                                                            transform):
    path = mixed_tar(tmp_path, odd_images, tar_writer)
    pipe = turbofeed.Pipeline(path, num_workers=2, gpu_decode=stand_in, transform=transform)
    samples = run(pipe)
    assert stand_in.calls == [6]
    assert [s.label for s in samples] == [0, 1, 2, 4, 4, 5]  # k3 (truncated) replaced by the next good one
    assert [s.key for s in samples][3] == "k4"
    # CMYK refused by the decoder; the truncated one by the scan check, before the decoder
    assert pipe.stats.errors == {"gpu_fallback": 1, "decode.gpu": 1}
    assert pipe.stats.replaced == 1
    cmyk = samples[1].get_gpu_tensor()  # decoded on the CPU, handed out like the others
    assert cmyk.dtype == torch.uint8 and cmyk.shape[2] == 3
    if transform is None:
        assert np.array_equal(samples[1].get_image(), decode(odd_images["cmyk"]))


def test_skip_and_raise_apply_to_what_nobody_decodes(tmp_path, odd_images, tar_writer, stand_in):
    path = mixed_tar(tmp_path, odd_images, tar_writer)
    pipe = turbofeed.Pipeline(path, num_workers=2, gpu_decode=stand_in, on_error="skip")
    assert [s.label for s in run(pipe)] == [0, 1, 2, 4, 5] and pipe.stats.skipped == 1
    pipe = turbofeed.Pipeline(path, num_workers=2, gpu_decode=stand_in, on_error="raise")
    with pytest.raises(turbofeed.SampleError, match=r"decode\.gpu: .*mixed\.tar/k3"):  # refused before the decoder
        pipe.next_batch(6)
    assert pipe.next_batch(6) == []  # the epoch ended there, as on the CPU path
    pipe.stop()


def test_unreadable_header_goes_through_the_policy_on_the_worker(tmp_path, odd_images, tar_writer, stand_in):
    path = tar_writer(str(tmp_path / "g.tar"), [("a.jpg", odd_images["rgb"]), ("a.cls", b"0"),
                                               ("b.jpg", odd_images["garbage"]), ("b.cls", b"1")])
    pipe = turbofeed.Pipeline(path, num_workers=1, gpu_decode=stand_in, transform=T.imagenet_eval(32))
    assert [s.label for s in run(pipe)] == [0, 0]
    assert pipe.stats.errors == {"decode.gpu": 1} and stand_in.calls == [2]


def test_without_a_gpu_gpu_decode_true_warns_once_and_decodes_on_the_cpu(shards):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.warns(RuntimeWarning, match="no CUDA GPU visible to PyTorch; decoding on the CPU") as caught:
        pipe = turbofeed.Pipeline(shards, num_workers=2, gpu_decode=True, device_id=0)
    assert len(caught) == 1 and pipe.decoder is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning while running
        samples = run(pipe)
    assert len(samples) == 120 and all(s.tensor is None for s in samples)
    assert np.array_equal(samples[0].get_image(), run(turbofeed.Pipeline(shards, num_workers=1))[0].get_image())
    assert pipe.stats.errors == {"gpu_fallback": 1}


def test_gpu_decode_rejects_what_is_not_a_decoder(shards):
    with pytest.raises(TypeError, match="gpu_decode must be True, False or a decoder"):
        turbofeed.Pipeline(shards, gpu_decode="cuda")


def test_without_decoding_the_decoder_is_not_used(shard_paths, stand_in):
    with turbofeed.Pipeline(shard_paths[0], num_workers=1, decode_jpeg=False, gpu_decode=stand_in) as pipe:
        s = pipe.next_batch(1)[0]
    assert s.data is not None and s.tensor is None and stand_in.calls == []


def test_the_cpu_pipeline_does_not_import_torch(shard_paths):
    code = ("import sys, turbofeed; p = turbofeed.Pipeline(sys.argv[1], num_workers=1); p.next_batch(1); "
            "p.stop(); assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code, shard_paths[0]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
