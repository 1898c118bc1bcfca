"""Hostile input has a bounded cost: an image declaring more pixels than
``turbofeed.decode.max_pixels()`` (Pillow's ``MAX_IMAGE_PIXELS`` unless
``TURBOFEED_MAX_PIXELS`` says otherwise) is refused from its header, before anything the
size of the image is allocated or decoded, on every path (native crop decode, Python
decode, Pillow, the GPU header path), and the loader counts it as one bad sample.

The hostile files are real small images whose headers were patched to declare
60000 x 60000 pixels (3.6 gigapixels in about 1.5 KB). Before the limit, the Python
decode of that JPEG took 26 s and 10 GB (measured on the 2-core test machine).
"""

from __future__ import annotations

import io
import logging
import resource
import struct
import tarfile
import zlib

import numpy as np
import pytest
from builders import encode, photo, write_tar
import torch
from PIL import Image

import turbofeed
from turbofeed import transforms as T
from turbofeed.decode import decode, decode_jpeg, decode_pillow, max_pixels, native, probe
from turbofeed.errors import ImageTooLarge

BOMB = 60000  # pixels per side: 3.6e9 pixels, 10.8 GB as RGB
MAX_GROWTH_MB = 200  # sanity bound on the peak RSS a refused bomb may add


def jpeg_declaring(height: int, width: int, **kw) -> bytes:
    """A real small JPEG whose SOF marker was patched to declare ``height`` x ``width``."""
    data = bytearray(encode(photo(), quality=90, **kw))
    i = 2
    while True:
        assert data[i] == 0xFF
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):  # SOF0/1/2: precision, height, width
            data[i + 5:i + 9] = struct.pack(">HH", height, width)
            return bytes(data)
        i += 2 + length


def png_declaring(height: int, width: int) -> bytes:
    """A real small PNG whose IHDR was patched to declare ``height`` x ``width`` (CRC fixed)."""
    data = bytearray(encode(photo(), "PNG"))
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@pytest.fixture
def default_limit(monkeypatch):
    """Pillow's default limit, whatever the environment running the tests says."""
    monkeypatch.delenv("TURBOFEED_MAX_PIXELS", raising=False)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", int(1024 * 1024 * 1024 // 4 // 3))
    return Image.MAX_IMAGE_PIXELS


# ---------------------------------------------------------------- the limit


def test_default_is_pillows_limit_read_at_call_time(default_limit, monkeypatch):
    assert max_pixels() == default_limit == 89478485
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 5000)
    assert max_pixels() == 5000
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    assert max_pixels() is None


@pytest.mark.parametrize("value, expected", [("5000", 5000), (" 123456789 ", 123456789), ("0", None),
                                             ("none", None), ("None", None)])
def test_env_var_overrides_pillow(default_limit, monkeypatch, value, expected):
    monkeypatch.setenv("TURBOFEED_MAX_PIXELS", value)
    assert max_pixels() == expected


@pytest.mark.parametrize("value", ["lots", "-5", "1e9"])
def test_env_var_rubbish_names_the_variable(default_limit, monkeypatch, value):
    monkeypatch.setenv("TURBOFEED_MAX_PIXELS", value)
    with pytest.raises(ValueError, match="TURBOFEED_MAX_PIXELS"):
        max_pixels()


def test_error_names_pixels_limit_and_how_to_raise_it():
    err = ImageTooLarge(BOMB, BOMB, 89478485)
    assert isinstance(err, ValueError) and isinstance(err, turbofeed.TurbofeedError)
    text = str(err)
    assert "60000x60000" in text and "3600000000 pixels" in text and "89478485" in text
    assert "TURBOFEED_MAX_PIXELS" in text and "MAX_IMAGE_PIXELS" in text


# ---------------------------------------------------------------- decoders


needs_native = pytest.mark.skipif(not native.available(), reason="turbofeed.decode._crop is not built")


@needs_native
@pytest.mark.parametrize("kind", ["baseline", "progressive", "cmyk"])
@pytest.mark.parametrize("box", [(0, 0, BOMB, BOMB), (30000, 30000, 30224, 30224)])
def test_native_crop_resize_refuses_from_the_header(default_limit, kind, box):
    # CMYK would otherwise go back to the general decoder (NotImplementedError).
    if kind == "cmyk":
        data = bytearray(encode(photo().convert("CMYK"), quality=90))
        i = data.index(b"\xff\xc0")
        data[i + 5:i + 9] = struct.pack(">HH", BOMB, BOMB)
        data = bytes(data)
    else:
        data = jpeg_declaring(BOMB, BOMB, progressive=kind == "progressive")
    out = np.empty((3, 224, 224), np.uint8)
    before = _peak_mb()
    with pytest.raises(ImageTooLarge, match="3600000000 pixels") as info:
        native.crop_resize(data, box, out)
    assert info.value.limit == default_limit and (info.value.height, info.value.width) == (BOMB, BOMB)
    assert _peak_mb() - before < MAX_GROWTH_MB
    # The per-thread decoder state is fine afterwards.
    good = encode(photo(), quality=90)
    native.crop_resize(good, (0, 0, 128, 96), out)
    expected = np.asarray(Image.fromarray(decode(good)).resize((224, 224), Image.BILINEAR, box=(0, 0, 128, 96)))
    assert np.array_equal(out.transpose(1, 2, 0), expected)


@needs_native
def test_native_limit_is_an_argument(default_limit):
    good = encode(photo(), quality=90)  # 96 x 128 = 12288 pixels
    out = np.empty((3, 32, 32), np.uint8)
    with pytest.raises(ImageTooLarge, match="12288 pixels"):
        native.crop_resize(good, (0, 0, 128, 96), out, max_pixels=12287)
    native.crop_resize(good, (0, 0, 128, 96), out, max_pixels=12288)  # at the limit: fine
    pixels = np.zeros((96, 128, 3), np.uint8)
    with pytest.raises(ImageTooLarge, match="12288 pixels"):
        native.resize(pixels, (0, 0, 128, 96), out, max_pixels=12287)
    native.resize(pixels, (0, 0, 128, 96), out, max_pixels=12288)
    native.resize(pixels, (0, 0, 128, 96), out, max_pixels=None)


@pytest.mark.parametrize("kind", ["jpeg", "progressive", "png"])
def test_python_decode_refuses_from_the_header(default_limit, kind):
    data = png_declaring(BOMB, BOMB) if kind == "png" else jpeg_declaring(BOMB, BOMB, progressive=kind == "progressive")
    before = _peak_mb()
    # Above twice its limit Pillow refuses in Image.open, before turbofeed sees the size:
    # its DecompressionBombError (a bad image, "Image size (3600000000 pixels) exceeds ...").
    with pytest.raises(ValueError if kind == "png" else ImageTooLarge, match="3600000000 pixels"):
        decode(data)
    if kind != "png":
        with pytest.raises(ImageTooLarge):
            decode_jpeg(data)
    assert _peak_mb() - before < MAX_GROWTH_MB


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_pillow_fallback_cannot_bypass_the_limit(default_limit, monkeypatch):
    # Pillow itself only warns between its limit and twice its limit: 10000 x 10000.
    with pytest.raises(ImageTooLarge, match="100000000 pixels"):
        decode(png_declaring(10000, 10000))
    # Real, valid images Pillow would decode happily are refused over a small limit.
    monkeypatch.setenv("TURBOFEED_MAX_PIXELS", "12287")
    for data in (encode(photo(), "PNG"), encode(photo(), "WEBP"), encode(photo(), quality=90)):
        with pytest.raises(ImageTooLarge, match="12288 pixels"):
            decode(data)
        with pytest.raises(ImageTooLarge):
            decode_pillow(data)
    monkeypatch.setenv("TURBOFEED_MAX_PIXELS", "12288")
    assert decode(encode(photo(), "PNG")).shape == (96, 128, 3)


def test_decode_limit_argument_and_arrays(default_limit):
    good = encode(photo(), quality=90)
    assert decode(good, max_pixels=None).shape == (96, 128, 3)
    with pytest.raises(ImageTooLarge):
        decode(good, max_pixels=100)
    with pytest.raises(ImageTooLarge):
        decode(np.zeros((96, 128), np.uint8), max_pixels=100)
    assert decode(np.zeros((96, 128), np.uint8), max_pixels=12288).shape == (96, 128, 3)


# ---------------------------------------------------------------- the loader


@pytest.fixture
def bomb_shard(tmp_path):
    """14 samples: 12 good JPEGs and 2 bombs (s003.jpg, s008.png) declaring 60000 x 60000."""
    members, bad = [], {3: ("jpg", jpeg_declaring(BOMB, BOMB)), 8: ("png", png_declaring(BOMB, BOMB))}
    for i in range(14):
        ext, payload = bad.get(i, ("jpg", encode(photo(seed=i), quality=90)))
        members += [(f"s{i:03d}.{ext}", payload), (f"s{i:03d}.cls", str(i).encode())]
    path = write_tar(str(tmp_path / "bombs.tar"), members)
    return path


@pytest.fixture(params=["native", "python"])
def cpu_path(request, monkeypatch):
    """Run the loader with the native crop decoder (where built) and with the Python path."""
    if request.param == "native" and not native.available():
        pytest.skip("turbofeed.decode._crop is not built")
    monkeypatch.setattr(native, "_ENABLED", request.param == "native")
    return request.param


@pytest.mark.parametrize("transform", [T.imagenet_train(32), None], ids=["train", "no-transform"])
def test_replace_delivers_full_batches_and_counts_each_bomb_once(default_limit, bomb_shard, cpu_path, transform,
                                                                 caplog):
    loader = turbofeed.DataLoader(bomb_shard, batch_size=4, num_workers=2, transform=transform,
                                  on_error="replace")
    before = _peak_mb()
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        batches = list(loader)
    assert [len(x) for x, _ in batches] == [4, 4, 4, 2]
    labels = torch.cat([y for _, y in batches]).tolist()
    assert 3 not in labels and 8 not in labels
    assert loader.stats.errors == {"decode.cpu": 2} and loader.stats.replaced == 2
    assert _peak_mb() - before < MAX_GROWTH_MB
    jpeg_bomb = [r.getMessage() for r in caplog.records if "bombs.tar/s003" in r.getMessage()]
    assert len(jpeg_bomb) == 1 and "3600000000 pixels is over the limit of 89478485" in jpeg_bomb[0]


def test_raise_names_shard_key_and_pixels(default_limit, bomb_shard, cpu_path):
    loader = turbofeed.DataLoader(bomb_shard, batch_size=4, num_workers=1, transform=T.imagenet_eval(32),
                                  on_error="raise")
    with pytest.raises(turbofeed.SampleError) as info:
        list(loader)
    err = info.value
    assert (err.shard.endswith("bombs.tar"), err.key, err.stage) == (True, "s003", "decode.cpu")
    assert isinstance(err.__cause__, ImageTooLarge)
    assert "bombs.tar/s003" in str(err) and "3600000000 pixels" in str(err) and "89478485" in str(err)


@pytest.mark.parametrize("setting", ["env", "pillow", "env-over-pillow", "env-none"])
def test_loader_limit_is_configurable(default_limit, cpu_path, monkeypatch, setting, tmp_path):
    """Two 96x128 JPEGs (12288 pixels) and two 64x64: a limit of 12287 from the variable or
    from Pillow refuses the large two; the variable, when set, wins over Pillow."""
    if setting == "env":
        monkeypatch.setenv("TURBOFEED_MAX_PIXELS", "12287")
    elif setting == "pillow":
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 12287)
    elif setting == "env-over-pillow":  # the variable wins over Pillow's setting
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 12287)
        monkeypatch.setenv("TURBOFEED_MAX_PIXELS", "12288")
    else:
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 12287)
        monkeypatch.setenv("TURBOFEED_MAX_PIXELS", "none")
    path = str(tmp_path / "small.tar")
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, size in enumerate([(96, 128), (64, 64), (96, 128), (64, 64)]):
            for name, payload in ((f"k{i}.jpg", encode(photo(*size, seed=i), quality=90)), (f"k{i}.cls", b"1")):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    loader = turbofeed.DataLoader(path, batch_size=4, num_workers=1, transform=T.imagenet_eval(32),
                                  on_error="skip")
    sizes = [len(x) for x, _ in loader]
    refused = setting in ("env", "pillow")
    assert sizes == ([2] if refused else [4])
    assert loader.stats.errors == ({"decode.cpu": 2} if refused else {})


class _RecordingDecoder:
    """A stand-in for the GPU decoder that records what reaches it and decodes on the CPU."""

    device = torch.device("cpu")

    def __init__(self) -> None:
        self.seen: list[int] = []

    def decode(self, datas):
        out = []
        for data in datas:
            info = probe(data)
            self.seen.append(info.height * info.width)
            if info.height * info.width > 10 ** 6:  # never decode a bomb here, whatever happens
                out.append(None)
            else:
                out.append(torch.from_numpy(np.ascontiguousarray(decode(data).transpose(2, 0, 1))))
        return out


def test_gpu_header_path_refuses_before_the_decoder(default_limit, bomb_shard):
    decoder = _RecordingDecoder()
    loader = turbofeed.DataLoader(bomb_shard, batch_size=4, num_workers=2, transform=T.imagenet_eval(32),
                                  gpu_decode=decoder, on_error="replace")
    assert [len(x) for x, _ in loader] == [4, 4, 4, 2]
    assert len(decoder.seen) == 14 and set(decoder.seen) == {96 * 128}  # the bombs never reached it
    assert loader.stats.errors == {"decode.gpu": 2}


def test_gpu_decoder_refuses_over_the_limit_before_its_backend(default_limit):
    """GpuDecoder (no GPU needed here: its backend call is replaced) returns None for a
    bomb, as for any image it rejects, and never hands it to nvJPEG; the caller's CPU
    fallback then names the error. Covers the Pipeline, which calls it without headers."""
    from turbofeed.decode.gpu import GpuDecoder

    decoder = GpuDecoder.__new__(GpuDecoder)  # skips the CUDA checks of __init__
    decoder.max_pixels = default_limit
    backend_saw: list[bytes] = []
    decoder._decode = lambda datas: backend_saw.extend(datas) or [f"image {len(d)}" for d in datas]
    good, bomb = encode(photo(), quality=90), jpeg_declaring(BOMB, BOMB)
    assert decoder.decode([good, bomb, b"not a jpeg"]) == [f"image {len(good)}", None, None]
    assert backend_saw == [good]  # nor data without a readable JPEG header (nvJPEG fails the batch on it)
    assert decoder.decode([bomb]) == [None] and decoder.decode([]) == []
