"""transforms.render: one resample of the window into the batch slot agrees with Pillow's
crop + resize, flips mirror exactly, CHW/HWC layouts hold the same pixels, and the output
op computes (x / 255 - mean) / std."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from PIL import Image

from turbofeed.transforms import (CenterCrop, Compose, Draws, Normalize, RandomResizedCrop, Resize,
                                  ToDtype, Window, resample, write_slot)


@pytest.fixture(scope="module")
def photos(shard_paths) -> list[np.ndarray]:
    """24 ImageNet-like photos (8 per shard), decoded by Pillow so only resampling differs."""
    out = []
    for path in shard_paths:
        with tarfile.open(path) as tf:
            jpgs = [m for m in tf.getmembers() if m.name.endswith(".jpg")][:8]
            out += [np.asarray(Image.open(io.BytesIO(tf.extractfile(m).read())).convert("RGB"))
                    for m in jpgs]
    return out


def _render(image: np.ndarray, window: Window, **kw) -> np.ndarray:
    out = np.empty((window.height, window.width, 3), np.uint8)
    write_slot(resample(image, window), out, flip=False, channels_first=False, output=None, **kw)
    return out


def test_random_resized_crop_matches_pillow_crop_then_resize(photos):
    """Reference: ``img.crop(box).resize((w, h), BILINEAR)`` with the same integer box.

    Measured over these 24 photos: mean abs diff <= 0.25, max <= 1 away from the outermost
    ring of output pixels. It is not 0 because Pillow's ``resize(box=...)`` (one resample of
    the full image, which turbofeed uses) lets the antialiasing filter reach the source
    pixels just outside the box at the border, where the cropped copy has none; inside, the
    filter weights match up to fixed-point rounding (one level)."""
    t = Compose([RandomResizedCrop(224)])
    for gid, image in enumerate(photos):
        win = t.window(image.shape[0], image.shape[1], Draws(0, 0, gid))
        box = tuple(int(v) for v in win.box)
        assert box == win.box  # integer crop offsets, as torchvision
        ref = np.asarray(Image.fromarray(image).crop(box).resize((224, 224), Image.BILINEAR))
        diff = np.abs(_render(image, win).astype(np.int16) - ref)
        assert diff.mean() < 0.5
        assert diff[1:-1, 1:-1].max() <= 1


def test_resize_center_crop_matches_torchvision_two_step_pil_path(photos):
    """One resample of the composed box equals torchvision's PIL eval path (resize the
    short side to 256, then crop the centre 224): measured max 1, mean < 0.004."""
    t = Compose([Resize(256), CenterCrop(224)])
    for image in photos:
        h, w = image.shape[:2]
        win = t.window(h, w, Draws(0, 0, 0))
        rh, rw = (256, int(256 * w / h)) if h <= w else (int(256 * h / w), 256)
        top, left = round((rh - 224) / 2), round((rw - 224) / 2)
        ref = np.asarray(Image.fromarray(image).resize((rw, rh), Image.BILINEAR)
                         .crop((left, top, left + 224, top + 224)))
        diff = np.abs(_render(image, win).astype(np.int16) - ref)
        assert diff.max() <= 1 and diff.mean() < 0.05


def test_whole_image_window_is_not_resampled(photos):
    image = photos[0]
    h, w = image.shape[:2]
    assert resample(image, Window((0.0, 0.0, float(w), float(h)), h, w)) is image


def test_flip_and_layouts(photos):
    """flip=True mirrors columns exactly; CHW holds the HWC pixels channel by channel."""
    pixels = resample(photos[1], Compose([CenterCrop(200)]).window(*photos[1].shape[:2], None))
    hwc, hwc_flip = np.empty_like(pixels), np.empty_like(pixels)
    chw, chw_flip = (np.empty((3, 200, 200), np.uint8) for _ in range(2))
    write_slot(pixels, hwc, flip=False, channels_first=False, output=None)
    write_slot(pixels, hwc_flip, flip=True, channels_first=False, output=None)
    write_slot(pixels, chw, flip=False, channels_first=True, output=None)
    write_slot(pixels, chw_flip, flip=True, channels_first=True, output=None)
    assert np.array_equal(hwc, pixels) and np.array_equal(hwc_flip, pixels[:, ::-1])
    assert np.array_equal(hwc_flip[:, 0], pixels[:, -1])
    assert np.array_equal(chw, pixels.transpose(2, 0, 1))
    assert np.array_equal(chw_flip, pixels[:, ::-1].transpose(2, 0, 1))


@pytest.mark.parametrize("channels_first", [True, False])
@pytest.mark.parametrize("mean,std", [(None, None), ((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])
def test_normalize_output(photos, channels_first, mean, std):
    """out = (x / 255 - mean) / std within 1e-5, in float32, in either layout."""
    op = Normalize() if mean is None else Normalize(mean, std)
    pixels = photos[2][:64, :80]
    shape = (3, 64, 80) if channels_first else (64, 80, 3)
    out = np.empty(shape, np.float32)
    write_slot(pixels, out, flip=True, channels_first=channels_first, output=op.spec)
    expected = (pixels[:, ::-1] / 255.0 - np.array(op.mean)) / np.array(op.std)
    if channels_first:
        expected = expected.transpose(2, 0, 1)
    assert np.abs(out - expected).max() < 1e-5


def test_to_dtype_scales_to_unit_range(photos):
    pixels = photos[3][:32, :32]
    out = np.empty((3, 32, 32), np.float32)
    write_slot(pixels, out, flip=False, channels_first=True, output=ToDtype("float32").spec)
    assert np.abs(out - pixels.transpose(2, 0, 1) / 255.0).max() < 1e-6
    raw = np.empty((3, 32, 32), np.float32)
    write_slot(pixels, raw, flip=False, channels_first=True, output=ToDtype(scale=False).spec)
    assert np.array_equal(raw, pixels.transpose(2, 0, 1).astype(np.float32))
