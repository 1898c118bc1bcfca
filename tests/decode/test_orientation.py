"""EXIF orientation: ``apply_exif_orientation=True`` gives what ``ImageOps.exif_transpose``
gives, for orientations 1-8, on the native crop path (the window mapped onto the stored
pixels, only the output turned), the full-decode path and the GPU path; off by default.

The JPEGs are written by Pillow with an Orientation tag; the references are Pillow's
``exif_transpose`` of the decoded image, cropped and resized by the Python path with the
same window (the loaders' windows come from (seed, epoch, sample id))."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

import turbofeed
from builders import encode
from image_cases import exif_jpeg, textured
from turbofeed import transforms as T
from turbofeed.decode import decode, native
from turbofeed.decode.orientation import jpeg_orientation, orientation, stored_box, upright, upright_size
from turbofeed.engine.stats import Stats
from turbofeed.engine.work import SampleWork
from turbofeed.io import IndexedDataset
from turbofeed.transforms import Window, resample

TAGS = range(1, 9)
STORED = textured(60, 100, seed=5)  # stored 100 wide, 60 high: turned images are 60 x 100


def reference(data: bytes) -> np.ndarray:
    """Pillow's upright image."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


@pytest.mark.parametrize("tag", TAGS)
def test_the_tag_is_read_as_pillow_reads_it(tag):
    data = exif_jpeg(STORED, tag)
    with Image.open(io.BytesIO(data)) as im:
        assert im.getexif()[0x0112] == tag
    assert jpeg_orientation(data) == orientation(data) == tag
    assert jpeg_orientation(memoryview(data)) == tag  # mapped shards hand out views
    png = encode(Image.fromarray(STORED), "PNG", exif=Image.open(io.BytesIO(data)).getexif().tobytes())
    assert orientation(png) == tag


def test_no_or_odd_exif_is_orientation_one():
    assert orientation(encode(Image.fromarray(STORED))) == 1
    assert orientation(exif_jpeg(STORED, 9)) == 1  # not an orientation: ignored, as by exif_transpose
    assert orientation(STORED) == 1
    assert jpeg_orientation(b"\xff\xd8\xff\xe1\x00\x10Exif\x00\x00MM\x00*\x00\x00\x00\x08") == 1  # cut short


@pytest.mark.parametrize("tag", TAGS)
def test_upright_equals_exif_transpose(tag):
    data = exif_jpeg(STORED, tag)
    turned = upright(decode(data), tag)
    assert turned.shape[:2] == upright_size(60, 100, tag)
    assert np.array_equal(turned, reference(data))


@pytest.mark.parametrize("tag", TAGS)
def test_a_window_maps_onto_the_stored_pixels(tag):
    """Resampling the stored box and turning the output is resampling the turned image,
    within a rounding (mirrored filter weights round apart; transposed, the two passes swap)."""
    rng = random.Random(tag)
    h, w = upright_size(60, 100, tag)
    for _ in range(20):
        x0, y0 = rng.uniform(0, w - 10), rng.uniform(0, h - 10)
        box = (x0, y0, rng.uniform(x0 + 5, w), rng.uniform(y0 + 5, h))
        window = Window(box, 17, 23, False)
        want = resample(np.ascontiguousarray(upright(STORED, tag)), window)
        out_h, out_w = upright_size(17, 23, tag)
        got = upright(resample(STORED, Window(stored_box(box, h, w, tag), out_h, out_w, False)), tag)
        assert np.abs(got.astype(int) - want).max() <= (0 if tag == 1 else 1)


@pytest.fixture
def rotated_shard(tmp_path, tar_writer):
    """One JPEG per orientation 1-8 (key t1..t8, label = tag), same stored pixels."""
    members = []
    for tag in TAGS:
        members += [(f"t{tag}.jpg", exif_jpeg(textured(60, 100, seed=tag), tag)), (f"t{tag}.cls", str(tag).encode())]
    return tar_writer(str(tmp_path / "rotated.tar"), members)


def expected(path: str, transform, *, seed: int = 0, epoch: int = 0) -> dict[int, np.ndarray]:
    """Per tag: Pillow's upright image, cropped with the window the loader draws for it
    (flipped when the window says so), CHW."""
    dataset = IndexedDataset(path)
    work = SampleWork(dataset, transform, Stats(), seed=seed, epoch=epoch)
    out = {}
    for gid in range(dataset.num_samples):
        data = dataset.read(gid)
        turned = reference(data)
        window = transform.window(*turned.shape[:2], work.draws(gid))
        pixels = resample(turned, window)
        out[int(dataset.labels[gid])] = (pixels[:, ::-1] if window.flip else pixels).transpose(2, 0, 1)
    return out


@pytest.mark.parametrize("native_path", [True, False], ids=["native", "python"])
def test_sample_work_turns_the_crop_upright(rotated_shard, native_path):
    if native_path and not native.available():
        pytest.skip("turbofeed.decode._crop is not built")
    transform = T.imagenet_train(24, scale=(0.2, 0.6))  # random, off-centre windows and flips
    want = expected(rotated_shard, transform)
    dataset = IndexedDataset(rotated_shard)
    work = SampleWork(dataset, transform, Stats(), seed=0, epoch=0, orient=True)
    work.native = native_path
    for gid in range(dataset.num_samples):
        if native_path:  # really the crop decoder, not a fallback to the full decode
            assert work._native(gid, dataset.read(gid), None, channels_first=False) is not None
        got = work.load(gid)
        pixels = (got.pixels[:, ::-1] if got.flip else got.pixels).transpose(2, 0, 1)
        tag = int(dataset.labels[gid])
        assert np.abs(pixels.astype(int) - want[tag]).max() <= 1, tag


@pytest.mark.parametrize("gpu", [False, True, "hybrid"], ids=["cpu", "gpu-stand-in", "hybrid"])
def test_loader_applies_exif_orientation(rotated_shard, gpu, stand_in_decoder):
    transform = T.imagenet_train(24, scale=(0.2, 0.6))
    loader = turbofeed.DataLoader(rotated_shard, batch_size=8, num_workers=2, transform=transform,
                                  apply_exif_orientation=True, gpu_decode=stand_in_decoder if gpu else False,
                                  hybrid=gpu == "hybrid")
    images, labels = next(iter(loader))
    want = expected(rotated_shard, transform)
    for image, tag in zip(images.numpy(), labels.tolist()):
        assert np.abs(image.astype(int) - want[tag]).max() <= 1, tag


def test_pipeline_full_images_come_upright(rotated_shard, stand_in_decoder):
    for gpu in (False, stand_in_decoder):
        with turbofeed.Pipeline(rotated_shard, num_workers=2, apply_exif_orientation=True, gpu_decode=gpu) as pipe:
            for s in pipe:
                data = IndexedDataset(rotated_shard).read(int(s.key[1:]) - 1)
                assert np.array_equal(s.get_image(), reference(data)), (s.key, gpu)


def test_pipeline_without_decoding_turns_on_demand(rotated_shard):
    with turbofeed.Pipeline(rotated_shard, num_workers=1, decode_jpeg=False, apply_exif_orientation=True) as pipe:
        for s in pipe:
            assert np.array_equal(s.get_image(), reference(s.data)), s.key


def test_off_by_default_pixels_as_stored(rotated_shard):
    with turbofeed.Pipeline(rotated_shard, num_workers=1) as pipe:
        assert {s.get_image().shape for s in pipe} == {(60, 100, 3)}


@pytest.fixture
def stand_in_decoder():
    """A CPU stand-in for the GPU decoder (no GPU here): decodes as stored, like nvJPEG
    with its own EXIF handling off."""

    class StandIn:
        device = torch.device("cpu")

        def decode(self, datas):
            return [torch.from_numpy(np.ascontiguousarray(decode(bytes(d)).transpose(2, 0, 1))) for d in datas]

    return StandIn()


def test_normalised_output_is_turned_too(rotated_shard):
    """Float slots (Normalize) go through the same turned window: the normalised batch is
    the uint8 batch, normalised."""
    kw = dict(batch_size=8, num_workers=2, apply_exif_orientation=True)
    raw, _ = next(iter(turbofeed.DataLoader(rotated_shard, transform=T.imagenet_train(24, scale=(0.2, 0.6)), **kw)))
    normed, _ = next(iter(turbofeed.DataLoader(rotated_shard, transform=T.imagenet_train(24, scale=(0.2, 0.6),
                                                                                         normalize=True), **kw)))
    mean = torch.tensor(T.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(T.IMAGENET_STD).view(1, 3, 1, 1)
    scale = 255.0 if max(T.IMAGENET_MEAN) < 1 else 1.0
    assert torch.allclose(normed, (raw.float() / scale - mean) / std, atol=1e-3)
