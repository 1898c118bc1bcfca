"""decode.native: the C crop-decode + resize equals the Python path (full decode, Pillow's
BILINEAR resize with a box, flip, layout, normalisation) bit for bit; rubbish raises
(ValueError) or defers to the general decoder (NotImplementedError) without poisoning the
next call; the loader gives the same batches with the native path on and off.

Measured on the fixtures (Pillow 13.0, libjpeg-turbo 2.1.5): max difference 0 against
Pillow for every case here (ImageNet-like, gray, progressive, 4:4:4, tiny, random boxes
touching the borders, upscaling boxes, both layouts, flips, every SIMD level). Older Pillow
releases run the two resampling passes always horizontal first, so their rounding can
differ by 1 level: the tolerance is 0 on Pillow >= 13 and 1 before.
"""

from __future__ import annotations

import io
import os
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import PIL
import pytest
import torch
from PIL import Image

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import decode, native, probe
from turbofeed.transforms import Compose, Draws, RandomHorizontalFlip, RandomResizedCrop, Window, resample, write_slot

# CI (CI=true) builds the extension from scripts/setup.sh, so there a missing build fails
# test_extension_is_built instead of silently skipping the file.
pytestmark = pytest.mark.skipif(not native.available() and not os.environ.get("CI"),
                                reason="turbofeed.decode._crop is not built")


def test_extension_is_built():
    assert native.available(), "turbofeed.decode._crop did not build: install gcc and libjpeg62-turbo-dev"

TOLERANCE = 0 if int(PIL.__version__.split(".")[0]) >= 13 else 1
# dct_scale=True against the full-size Python path, on the 24 112x112 RandomResizedCrops
# of the test shards where it applies (box >= 2x output): measured max 22 levels, mean
# 0.94 (a different, legitimate downscale: libjpeg's 1/2 IDCT, then the resize).
DCT_MAX, DCT_MEAN = 40, 1.5


def _jpegs(shard_paths, count: int) -> list[bytes]:
    out = []
    for path in shard_paths:
        with tarfile.open(path) as tar:
            out += [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".jpg")]
        if len(out) >= count:
            break
    return out[:count]


def _encode(im: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def _reference(data: bytes, box, height: int, width: int, *, flip=False, channels_first=False) -> np.ndarray:
    """The Python path: full decode, Pillow resize with the box, flip, layout."""
    pixels = decode(data)
    h, w = pixels.shape[:2]
    box = (max(0.0, box[0]), max(0.0, box[1]), min(float(w), box[2]), min(float(h), box[3]))
    ref = np.asarray(Image.fromarray(pixels).resize((width, height), Image.BILINEAR, box=box))
    if flip:
        ref = ref[:, ::-1]
    return np.ascontiguousarray(ref.transpose(2, 0, 1) if channels_first else ref)


def _native(data: bytes, box, height: int, width: int, *, flip=False, channels_first=False,
            dct_scale=False) -> np.ndarray:
    out = np.empty((3, height, width) if channels_first else (height, width, 3), np.uint8)
    native.crop_resize(data, box, out, flip=flip, channels_first=channels_first, dct_scale=dct_scale)
    return out


def _random_boxes(rng, h: int, w: int, n: int):
    """Random boxes and output sizes: touching each border, tiny (upscaling), whole image."""
    yield (0.0, 0.0, float(w), float(h)), h, w  # identity
    yield (0.0, 0.0, float(w), float(h)), 37, 53
    for i in range(n):
        bw, bh = rng.uniform(1, w), rng.uniform(1, h)
        x0, y0 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
        if i % 4 == 0:
            x0, y0 = 0.0, h - bh  # left and bottom borders
        elif i % 4 == 1:
            x0, y0 = w - bw, 0.0  # right and top borders
        elif i % 4 == 2:
            bw, bh = rng.uniform(1, min(w, 12)), rng.uniform(1, min(h, 12))  # small box: upscaling
            x0, y0 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
        yield (x0, y0, x0 + bw, y0 + bh), int(rng.integers(1, 260)), int(rng.integers(1, 260))


def _assert_close(out: np.ndarray, ref: np.ndarray, tolerance: int = TOLERANCE) -> None:
    assert out.shape == ref.shape
    diff = np.abs(out.astype(np.int16) - ref)
    assert diff.max() <= tolerance, f"max difference {diff.max()}"


def test_imagenet_like_random_resized_crops_match_the_python_path(shard_paths):
    """RandomResizedCrop(224) + flip windows, both layouts, as the loader draws them."""
    recipe = Compose([RandomResizedCrop(224), RandomHorizontalFlip()])
    for i, data in enumerate(_jpegs(shard_paths, 40)):
        info = probe(data)
        for j in range(3):
            window = recipe.window(info.height, info.width, Draws(0, 0, 3 * i + j))
            chw = bool(i % 2)
            out = _native(data, window.box, 224, 224, flip=window.flip, channels_first=chw)
            ref = _reference(data, window.box, 224, 224, flip=window.flip, channels_first=chw)
            _assert_close(out, ref)


@pytest.mark.parametrize("kind", ["rgb", "gray", "progressive", "444", "tall", "wide", "tiny", "gray_progressive"])
def test_random_boxes_on_every_kind_of_jpeg(odd_images, shard_paths, kind):
    photo = Image.open(io.BytesIO(_jpegs(shard_paths, 1)[0])).convert("RGB")
    data = {
        "rgb": odd_images["rgb"], "gray": odd_images["gray"], "progressive": odd_images["progressive"],
        "444": _encode(photo, quality=90, subsampling=0),
        "tall": _encode(photo.resize((150, 700)), quality=90),  # Pillow resamples vertically first
        "wide": _encode(photo.resize((733, 97)), quality=85, subsampling=1),
        "tiny": _encode(photo.resize((17, 9)), quality=85),
        "gray_progressive": _encode(photo.convert("L").resize((301, 555)), progressive=True),
    }[kind]
    info = probe(data)
    rng = np.random.default_rng(len(kind))
    for i, (box, oh, ow) in enumerate(_random_boxes(rng, info.height, info.width, 24)):
        flip, chw = bool(i % 3 == 0), bool(i % 2)
        out = _native(data, box, oh, ow, flip=flip, channels_first=chw)
        _assert_close(out, _reference(data, box, oh, ow, flip=flip, channels_first=chw))


def test_every_simd_level_gives_the_same_bytes(shard_paths):
    levels = [lv for lv in ("avx2", "sse2", "none") if _level_works(lv)]
    recipe = Compose([RandomResizedCrop(160, scale=(0.02, 1.0)), RandomHorizontalFlip()])
    cases = [(d, recipe.window(probe(d).height, probe(d).width, Draws(3, 0, k)))
             for k, d in enumerate(_jpegs(shard_paths, 12))]
    results = {}
    try:
        for level in levels:
            native._crop._simd(level)
            results[level] = [_native(d, w.box, 160, 160, flip=w.flip) for d, w in cases]
    finally:
        native._crop._simd("best")
    for level in levels[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(results[levels[0]], results[level])), level


def _level_works(level: str) -> bool:
    try:
        native._crop._simd(level)
        return True
    except ValueError:
        return False
    finally:
        native._crop._simd("best")


def test_box_outside_the_image_is_clamped_like_resample(odd_images):
    data = odd_images["rgb"]  # 128 x 96
    box = (-10.0, -5.5, 140.0, 99.0)
    window = Window(box, 40, 50)
    out = _native(data, box, 40, 50)
    assert np.array_equal(out, resample(decode(data), window))


@pytest.mark.parametrize("channels_first", [True, False])
def test_float32_normalisation_equals_write_slot(shard_paths, channels_first):
    spec = T.Normalize().spec
    data = _jpegs(shard_paths, 1)[0]
    info = probe(data)
    window = Compose([RandomResizedCrop(96), RandomHorizontalFlip(1.0)]).window(
        info.height, info.width, Draws(1, 0, 0))
    shape = (3, 96, 96) if channels_first else (96, 96, 3)
    out = np.empty(shape, np.float32)
    native.crop_resize(data, window.box, out, flip=True, channels_first=channels_first,
                       offset=spec.offset, factor=spec.factor)
    expected = np.empty(shape, np.float32)
    write_slot(resample(decode(data), window), expected, flip=True, channels_first=channels_first,
               output=spec)
    assert np.array_equal(out, expected)


def test_dct_scale_is_close_to_the_full_size_path(shard_paths):
    recipe = Compose([RandomResizedCrop(112)])
    worst, means, applied = 0, [], 0
    for k, data in enumerate(_jpegs(shard_paths, 40)):
        info = probe(data)
        window = recipe.window(info.height, info.width, Draws(7, 0, k))
        out = _native(data, window.box, 112, 112, dct_scale=True)
        ref = _reference(data, window.box, 112, 112)
        x0, y0, x1, y1 = window.box
        if x1 - x0 < 224 or y1 - y0 < 224:  # too small for 1/2 scaling: the exact path
            assert np.array_equal(out, ref)
            continue
        applied += 1
        diff = np.abs(out.astype(np.int16) - ref)
        worst, means = max(worst, int(diff.max())), means + [diff.mean()]
    assert applied >= 10
    assert worst <= DCT_MAX and np.mean(means) <= DCT_MEAN


def test_cmyk_and_truncated_defer_to_the_general_decoder(odd_images):
    out = np.empty((32, 32, 3), np.uint8)
    for kind in ("cmyk", "truncated"):
        with pytest.raises(NotImplementedError):
            native.crop_resize(odd_images[kind], (0, 0, 64, 64), out, channels_first=False)
    assert native.header(odd_images["cmyk"])[2] == "cmyk"


@pytest.mark.parametrize("data,match", [
    (b"", "empty"),
    (b"this is not an image" * 20, "not a JPEG"),
    (b"\xff\xd8\xff\xe0" + b"\x00" * 64 + b"\xff\xd9", "bad JPEG"),
])
def test_rubbish_raises_value_error(data, match):
    with pytest.raises(ValueError, match=match):
        native.crop_resize(data, (0, 0, 8, 8), np.empty((3, 8, 8), np.uint8))
    with pytest.raises(ValueError):
        native.header(data)


def test_corrupt_scan_with_an_eoi_marker_is_an_error(odd_images):
    good = odd_images["rgb"]
    cut = good[: len(good) * 2 // 3] + b"\xff\xd9"  # premature end of the entropy-coded data
    with pytest.raises(ValueError, match="bad JPEG"):
        native.crop_resize(cut, (0, 0, 128, 96), np.empty((96, 128, 3), np.uint8), channels_first=False)


def test_fuzzed_jpegs_never_crash_and_the_next_image_still_decodes(odd_images):
    good = odd_images["rgb"]
    expected = _native(good, (3.5, 2.0, 120.0, 90.0), 50, 60)
    rng = np.random.default_rng(11)
    outcomes = set()
    for i in range(300):
        data = bytearray(good)
        if i % 3 == 0:  # flip random bytes anywhere, keep SOI
            for pos in rng.integers(2, len(data), size=int(rng.integers(1, 20))):
                data[pos] = int(rng.integers(256))
        elif i % 3 == 1:  # cut anywhere, then end with EOI
            data = data[: int(rng.integers(2, len(data)))] + b"\xff\xd9"
        else:  # random garbage after the SOI marker
            data = b"\xff\xd8\xff" + rng.integers(0, 256, size=int(rng.integers(0, 3000)), dtype=np.uint8).tobytes()
        out = np.empty((50, 60, 3), np.uint8)
        try:
            native.crop_resize(bytes(data), (3.5, 2.0, 120.0, 90.0), out, channels_first=False)
            outcomes.add("decoded")
        except (ValueError, NotImplementedError) as exc:
            outcomes.add(type(exc).__name__)
        assert np.array_equal(_native(good, (3.5, 2.0, 120.0, 90.0), 50, 60), expected)
    assert {"ValueError"} <= outcomes


@pytest.mark.parametrize("shape,dtype", [((3, 8, 9), np.uint8), ((3, 8, 8), np.float32), ((3, 8, 8), np.int16)])
def test_bad_output_buffers_raise(odd_images, shape, dtype):
    with pytest.raises(ValueError):
        native._crop.crop_resize(odd_images["rgb"], 0, 0, 64, 64, np.empty(shape, dtype), 8, 8)


def test_non_contiguous_output_is_refused(odd_images):
    out = np.empty((3, 8, 16), np.uint8)[:, :, ::2]
    with pytest.raises((ValueError, BufferError)):
        native.crop_resize(odd_images["rgb"], (0, 0, 64, 64), out)


def test_header_matches_probe(shard_paths, odd_images):
    for data in _jpegs(shard_paths, 10) + [odd_images[k] for k in ("rgb", "gray", "progressive")]:
        info = probe(data)
        assert native.header(data)[:2] == (info.height, info.width)
    assert native.header(odd_images["gray"])[2] == "gray"
    assert native.header(odd_images["rgb"])[2] == "ycbcr"


def test_threads_share_nothing(shard_paths):
    """Per-thread decoder state: concurrent calls give the serial results."""
    datas = _jpegs(shard_paths, 16)
    recipe = Compose([RandomResizedCrop(64), RandomHorizontalFlip()])
    jobs = [(d, recipe.window(probe(d).height, probe(d).width, Draws(5, 0, k))) for k, d in enumerate(datas)] * 4
    serial = [_native(d, w.box, 64, 64, flip=w.flip) for d, w in jobs]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda job: _native(job[0], job[1].box, 64, 64, flip=job[1].flip), jobs))
    assert all(np.array_equal(a, b) for a, b in zip(serial, parallel))
    assert threading.active_count() >= 1


# ------------------------------------------------------------------ the loader hook

def _batches(paths, monkeypatch, enabled: bool, **kw):
    monkeypatch.setattr(native, "_ENABLED", enabled)
    loader = turbofeed.DataLoader(paths, batch_size=8, num_workers=2, return_keys=True, **kw)
    batches = [(x.clone(), y.clone(), list(k)) for x, y, k in loader]
    return batches, loader.stats


@pytest.mark.parametrize("kw", [
    {"transform": T.imagenet_train(64)},
    {"transform": T.imagenet_train(64, normalize=True), "channels_last": True},
    {"transform": T.imagenet_eval(48)},
    {"transform": T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.ToDtype("float16")])},
], ids=["uint8", "float32-channels-last", "eval", "float16"])
def test_loader_batches_are_the_same_with_and_without_native(shard_paths, monkeypatch, kw):
    with_native, stats = _batches(shard_paths[:1], monkeypatch, True, **kw)
    without, _ = _batches(shard_paths[:1], monkeypatch, False, **kw)
    assert len(with_native) == len(without)
    for (xa, ya, ka), (xb, yb, kb) in zip(with_native, without):
        assert ka == kb and torch.equal(ya, yb) and torch.equal(xa, xb)
    assert stats.seconds["decode.cpu"] > 0


def test_loader_falls_back_for_odd_and_bad_samples(tmp_path, odd_images, tar_writer, monkeypatch):
    """CMYK, PNG, truncated and rubbish samples take the general path: same pixels, same
    errors (stage decode.cpu), same replacements as without the native path."""
    kinds = ["rgb", "cmyk", "gray", "truncated", "progressive", "png_rgba", "garbage", "empty", "rgb"]
    members = []
    for i, kind in enumerate(kinds * 2):
        ext = "png" if kind.startswith("png") else "jpg"
        members += [(f"k{i:03d}.{ext}", odd_images[kind]), (f"k{i:03d}.cls", str(i).encode())]
    path = tar_writer(str(tmp_path / "odd.tar"), members)
    kw = {"transform": T.imagenet_train(32)}
    with_native, stats_native = _batches(path, monkeypatch, True, **kw)
    without, stats = _batches(path, monkeypatch, False, **kw)
    for (xa, ya, ka), (xb, yb, kb) in zip(with_native, without):
        assert ka == kb and torch.equal(ya, yb) and torch.equal(xa, xb)
    assert stats_native.errors == stats.errors and stats.errors["decode.cpu"] >= 6
    assert stats_native.replaced == stats.replaced == 6


def test_pipeline_samples_are_the_same_with_and_without_native(shard_paths, monkeypatch):
    def images(enabled):
        monkeypatch.setattr(native, "_ENABLED", enabled)
        pipe = turbofeed.Pipeline(tar_paths=shard_paths[:1], num_workers=2, transform=T.imagenet_train(48))
        pipe.start()
        try:
            got = []
            while batch := pipe.next_batch(16):
                got += [s.get_image().copy() for s in batch]
            return got
        finally:
            pipe.stop()
    a, b = images(True), images(False)
    assert len(a) == len(b) == 40 and all(np.array_equal(x, y) for x, y in zip(a, b))
