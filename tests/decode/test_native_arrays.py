"""The native resize of pre-decoded pixels (HDF5, Zarr, .npy samples): the same bytes as
the Python path (Pillow's resize of the box, then flip, layout and normalisation), on
real photo pixels, for every array shape a source may hold."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from PIL import Image

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import decode, native
from turbofeed.decode.cpu import as_rgb
from turbofeed.transforms import write_slot

pytestmark = pytest.mark.skipif(not native.available() and not os.environ.get("CI"),
                                reason="turbofeed.decode._crop is not built")


@pytest.fixture(scope="module")
def photo(shard_paths) -> np.ndarray:
    import tarfile

    with tarfile.open(shard_paths[0]) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
        return decode(tar.extractfile(member).read())


def _reference(pixels: np.ndarray, box, height: int, width: int, *, flip: bool, channels_first: bool,
               output=None) -> np.ndarray:
    rgb = as_rgb(pixels)
    h, w = rgb.shape[:2]
    box = (max(0.0, box[0]), max(0.0, box[1]), min(float(w), box[2]), min(float(h), box[3]))
    resized = np.asarray(Image.fromarray(rgb).resize((width, height), Image.BILINEAR, box=box))
    shape = (3, height, width) if channels_first else (height, width, 3)
    out = np.empty(shape, np.uint8 if output is None else np.float32)
    write_slot(resized, out, flip=flip, channels_first=channels_first, output=output)
    return out


def _boxes(rng: random.Random, h: int, w: int, n: int):
    yield (0.0, 0.0, float(w), float(h)), h, w  # identity
    yield (-5.0, -3.0, w + 7.0, h + 1.5), 31, 45  # outside the image: clamped
    for i in range(n):
        bw, bh = rng.uniform(1, w), rng.uniform(1, h)
        if i % 3 == 0:
            bw, bh = rng.uniform(1, min(w, 9)), rng.uniform(1, min(h, 9))  # upscaling
        x0, y0 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
        yield (x0, y0, x0 + bw, y0 + bh), rng.randint(1, 240), rng.randint(1, 240)


@pytest.mark.parametrize("layout", ["rgb", "gray2d", "gray1", "rgba", "tall", "wide"])
def test_random_boxes_give_the_python_paths_bytes(photo, layout):
    pixels = {
        "rgb": photo,
        "gray2d": photo[:, :, 1].copy(),
        "gray1": photo[:, :, :1].copy(),
        "rgba": np.concatenate([photo, np.full(photo.shape[:2] + (1,), 200, np.uint8)], axis=2),
        "tall": np.ascontiguousarray(np.asarray(Image.fromarray(photo).resize((90, 640)))),  # vertical pass first
        "wide": np.ascontiguousarray(np.asarray(Image.fromarray(photo).resize((700, 60)))),
    }[layout]
    rng = random.Random(layout)
    for i, (box, oh, ow) in enumerate(_boxes(rng, pixels.shape[0], pixels.shape[1], 30)):
        flip, chw = bool(i % 2), bool(i % 3 == 1)
        out = np.empty((3, oh, ow) if chw else (oh, ow, 3), np.uint8)
        native.resize(pixels, box, out, flip=flip, channels_first=chw)
        assert np.array_equal(out, _reference(pixels, box, oh, ow, flip=flip, channels_first=chw)), (box, oh, ow)


def test_float32_normalisation_equals_write_slot(photo):
    spec = T.Normalize().spec
    box = (33.2, 18.9, 301.7, 240.3)
    for chw in (True, False):
        out = np.empty((3, 64, 80) if chw else (64, 80, 3), np.float32)
        native.resize(photo, box, out, flip=True, channels_first=chw, offset=spec.offset, factor=spec.factor)
        ref = _reference(photo, box, 64, 80, flip=True, channels_first=chw, output=spec)
        assert np.allclose(out, ref, atol=1e-6)


def test_arrays_it_cannot_take_are_refused_with_a_reason(photo):
    out = np.empty((3, 20, 20), np.uint8)
    for bad, why in [(photo.astype(np.float32), "uint8"), (photo[:, ::2], "contiguous"),
                     (photo[:, :, :2].copy(), "uint8 \\(H, W"), (photo[None], "uint8 \\(H, W")]:
        with pytest.raises(ValueError, match=why):
            native.resize(bad, (0, 0, 10, 10), out)
    with pytest.raises(ValueError, match="empty or outside"):
        native.resize(photo, (5000, 5000, 6000, 6000), out)


def test_loader_over_npy_gives_the_same_batches_with_and_without_the_extension(array_dataset, monkeypatch):
    """The .npy samples (same-size photos) through RandomResizedCrop + flip, float32: the
    native resize and the Python path give identical batches (within float rounding)."""
    path = array_dataset("npy")
    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=4, transform=T.imagenet_train(24, normalize=True))
    with_native = [(x.clone(), y.clone()) for x, y in turbofeed.DataLoader(path, **kw)]
    monkeypatch.setattr(native, "_ENABLED", False)
    python_path = [(x.clone(), y.clone()) for x, y in turbofeed.DataLoader(path, **kw)]
    assert len(with_native) == len(python_path) == 3
    for (a, la), (b, lb) in zip(with_native, python_path):
        assert np.array_equal(la.numpy(), lb.numpy())
        assert np.allclose(a.numpy(), b.numpy(), atol=1e-5)
