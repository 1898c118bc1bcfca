"""Images nobody here wrote (Pillow's test images, tests/data/pillow/README.md): a JPEG
with a damaged scan is refused on every path, EXIF-turned photos come out upright, a
16-bit TIFF keeps its high byte, an animated GIF gives its first frame."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import decode, decode_pillow, native, scan
from turbofeed.decode.orientation import orientation, upright
from turbofeed.engine.stats import Stats
from turbofeed.engine.work import SampleWork
from turbofeed.io import IndexedDataset
from turbofeed.transforms import resample

DATA = Path(__file__).parent.parent / "data" / "pillow"


def read(name: str) -> bytes:
    return (DATA / name).read_bytes()


def test_a_real_damaged_scan_is_refused_everywhere():
    data = read("hopper_bad_exif.jpg")
    with Image.open(io.BytesIO(data)) as im:
        im.load()  # Pillow: no error, no warning, stripes
    for decoder in (decode, decode_pillow, scan.check):
        with pytest.raises(ValueError, match="Corrupt JPEG data: 1214 extraneous bytes before marker 0xd0"):
            decoder(data)
    if native.available():
        out = np.empty((3, 16, 16), np.uint8)
        with pytest.raises(ValueError, match="extraneous bytes"):
            native.crop_resize(data, (0, 0, 50, 50), out)  # a window far above the first bad byte


def test_a_real_damaged_scan_is_a_bad_sample_in_the_loader(tmp_path, tar_writer):
    members = [("a.jpg", read("hopper.jpg")), ("a.cls", b"0"), ("b.jpg", read("hopper_bad_exif.jpg")),
               ("b.cls", b"1"), ("c.jpg", read("truncated_jpeg.jpg")), ("c.cls", b"2")]
    path = tar_writer(str(tmp_path / "real.tar"), members)
    loader = turbofeed.DataLoader(path, batch_size=3, num_workers=1, transform=T.imagenet_eval(32), on_error="skip")
    assert [labels.tolist() for _, labels in loader] == [[0]]
    assert loader.stats.skipped == 2


@pytest.mark.parametrize("tag", range(2, 9))
def test_real_turned_photos_come_out_upright(tag):
    data = read(f"hopper_orientation_{tag}.jpg")
    assert orientation(data) == tag
    with Image.open(io.BytesIO(data)) as im:
        want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    turned = upright(decode(data), tag)
    assert np.array_equal(turned, want)
    # and upright really is upright: the photo as hopper.jpg holds it (re-encoded: close, not equal)
    assert np.abs(turned.astype(int) - decode(read("hopper.jpg"))).mean() < 6


@pytest.mark.parametrize("native_path", [True, False], ids=["native", "python"])
def test_real_turned_photos_crop_upright(tmp_path, tar_writer, native_path):
    if native_path and not native.available():
        pytest.skip("turbofeed.decode._crop is not built")
    members = []
    for tag in range(2, 9):
        members += [(f"t{tag}.jpg", read(f"hopper_orientation_{tag}.jpg")), (f"t{tag}.cls", str(tag).encode())]
    dataset = IndexedDataset(tar_writer(str(tmp_path / "turned.tar"), members))
    transform = T.imagenet_train(40, scale=(0.2, 0.5))
    work = SampleWork(dataset, transform, Stats(), seed=3, epoch=1, orient=True)
    work.native = native_path
    for gid in range(dataset.num_samples):
        data = dataset.read(gid)
        with Image.open(io.BytesIO(data)) as im:
            turned = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        window = transform.window(*turned.shape[:2], work.draws(gid))
        got = work.load(gid)
        assert got.flip == window.flip
        assert np.abs(got.pixels.astype(int) - resample(turned, window)).max() <= 1


def test_real_sixteen_bit_tiff_keeps_the_high_byte():
    data = read("16bit.cropped.tif")
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "I;16"
        values = np.asarray(im)
    assert values.max() > 255  # Pillow's convert("RGB") would clip these to white
    pixels = decode(data)
    assert np.array_equal(pixels, np.repeat((values >> 8).astype(np.uint8)[:, :, None], 3, axis=2))


def test_real_animated_gif_gives_its_first_frame():
    data = read("dispose_bgnd.gif")
    with Image.open(io.BytesIO(data)) as im:
        assert im.n_frames > 1
        first = np.asarray(im.convert("RGB"))
        im.seek(1)
        assert not np.array_equal(np.asarray(im.convert("RGB")), first)
    assert np.array_equal(decode(data), first)
