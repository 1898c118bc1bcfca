"""decode_field: one WebDataset member decoded by its extension, on real bytes. Images
come out HWC uint8 RGB under the pixel limit, a mask keeps its class indices exactly
(as_mask), txt/json/cls/npy give str/object/int/array, anything else its bytes; user
decoders win (full extension, then its last part); every failure is a FieldError naming
the extension (and the user decoder), except an image over the pixel limit
(ImageTooLarge, as decode raises it)."""

from __future__ import annotations

import io
import json
import resource
import struct
import zlib

import numpy as np
import pytest
from builders import encode, photo, small_jpeg
from PIL import Image

from turbofeed.decode import FIELD_TYPES, FieldError, decode, decode_field, decode_mask
from turbofeed.errors import ImageTooLarge, TurbofeedError

BOMB = 60000


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=True)
    return buf.getvalue()


def class_map(h: int = 48, w: int = 64, classes: int = 21, seed: int = 0) -> np.ndarray:
    """Blocky class indices 0..classes-1, every one present (a segmentation-like mask)."""
    cells = np.random.default_rng(seed).permutation(np.arange(48) % classes).reshape(6, 8).astype(np.uint8)
    return np.repeat(np.repeat(cells, h // 6, 0), w // 8, 1)


def palette_png(indices: np.ndarray) -> bytes:
    """A palette (mode P) PNG whose colours are unlike the indices (VOC-style masks)."""
    im = Image.fromarray(indices).convert("P")  # keeps the values as indices
    im.putpalette(np.random.default_rng(1).integers(0, 256, 768).astype(np.uint8).tobytes())
    return encode(im, "PNG")


def with_ihdr_size(png: bytes, height: int, width: int) -> bytes:
    """A real PNG whose IHDR was patched to declare ``height`` x ``width`` (CRC fixed)."""
    data = bytearray(png)
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


@pytest.fixture
def default_limit(monkeypatch):
    """Pillow's default limit, whatever the environment running the tests says."""
    monkeypatch.delenv("TURBOFEED_MAX_PIXELS", raising=False)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 89478485)
    return 89478485


# ---------------------------------------------------------------- images


@pytest.mark.parametrize("ext", ["jpg", "jpeg", "JPG", "image.jpg"])
def test_jpeg_is_hwc_uint8_rgb_through_decode(ext):
    data = small_jpeg(3)
    out = decode_field(ext, data)
    assert out.dtype == np.uint8 and out.shape == (32, 32, 3)
    assert np.array_equal(out, decode(data))
    assert np.array_equal(decode_field(ext, memoryview(data)), out)


@pytest.mark.parametrize("fmt, ext", [("PNG", "png"), ("WEBP", "webp"), ("BMP", "bmp"), ("PPM", "ppm"),
                                      ("TIFF", "tif"), ("GIF", "gif")])
def test_other_images_are_hwc_uint8_rgb(fmt, ext):
    im = photo()
    out = decode_field(ext, encode(im, fmt))
    assert out.dtype == np.uint8 and out.shape == (96, 128, 3)
    expected = np.asarray(Image.open(io.BytesIO(encode(im, fmt))).convert("RGB"))
    assert np.array_equal(out, expected)
    if fmt in ("PNG", "BMP", "PPM", "TIFF"):  # lossless: the very pixels
        assert np.array_equal(out, np.asarray(im))


def test_grey_png_without_as_mask_is_rgb_as_decode_gives_it():
    data = encode(Image.fromarray(class_map()), "PNG")
    out = decode_field("png", data)
    assert out.shape == (48, 64, 3) and np.array_equal(out, decode(data))


@pytest.mark.parametrize("ext", ["jpg", "png", "seg.png"])
def test_rubbish_image_names_the_extension(ext):
    for data in (b"", b"not an image at all", small_jpeg(0)[:200]):
        with pytest.raises(FieldError, match=f"^{ext} member is not a decodable image: ") as info:
            decode_field(ext, data)
        assert isinstance(info.value, ValueError) and isinstance(info.value, TurbofeedError)
    assert decode_field(ext, small_jpeg(1)).shape == (32, 32, 3)  # the next good one is fine


# ---------------------------------------------------------------- masks


def test_palette_mask_keeps_its_class_indices():
    indices = class_map()
    data = palette_png(indices)
    assert Image.open(io.BytesIO(data)).mode == "P"
    mask = decode_field("seg.png", data, as_mask=True)
    assert mask.dtype == np.uint8 and mask.shape == (48, 64)
    assert np.array_equal(mask, indices) and set(np.unique(mask)) == set(range(21))
    assert np.array_equal(decode_mask(data), indices)
    # As the main image it is the palette's colours, not the indices.
    rgb = decode_field("seg.png", data)
    assert rgb.shape == (48, 64, 3) and not np.array_equal(rgb[..., 0], indices)


@pytest.mark.parametrize("ext, mode, values, dtype", [
    ("png", "L", class_map(), np.uint8),
    ("png", "L", np.where(class_map() > 10, 255, 0).astype(np.uint8), np.uint8),  # 0/255 binary mask
    ("png", "I;16", class_map().astype(np.uint16) * 3000, np.uint16),  # instance ids past 255
    ("png", "1", (class_map() > 10).astype(np.uint8), np.uint8),
    ("tif", "I", class_map().astype(np.int32) * -100000, np.int32),
    ("tif", "F", class_map().astype(np.float32) / 7, np.float32),  # a depth map
])
def test_single_channel_masks_keep_their_values(ext, mode, values, dtype):
    im = Image.fromarray(values * 255).convert("1") if mode == "1" else Image.fromarray(values)
    data = encode(im, "PNG" if ext == "png" else "TIFF")
    assert Image.open(io.BytesIO(data)).mode == mode
    mask = decode_field(ext, data, as_mask=True)
    assert mask.dtype == dtype and mask.shape == (48, 64)
    assert np.array_equal(mask, values)


def test_grey_alpha_mask_drops_the_alpha():
    indices = class_map()
    data = encode(Image.fromarray(np.dstack([indices, np.full_like(indices, 200)])).convert("LA"), "PNG")
    mask = decode_field("png", data, as_mask=True)
    assert mask.shape == (48, 64) and mask.flags.c_contiguous and np.array_equal(mask, indices)


@pytest.mark.parametrize("fmt, ext", [("PNG", "png"), ("JPEG", "jpg")])
def test_colour_images_as_mask_are_rgb_as_decode(fmt, ext):
    data = encode(photo(), fmt)
    assert np.array_equal(decode_field(ext, data, as_mask=True), decode(data))


def test_as_mask_rubbish_names_the_extension():
    with pytest.raises(FieldError, match="^seg.png member is not a decodable image: empty file"):
        decode_field("seg.png", b"", as_mask=True)
    with pytest.raises(FieldError, match="^seg.png member is not a decodable image: not a decodable image"):
        decode_field("seg.png", palette_png(class_map())[:100], as_mask=True)


# ---------------------------------------------------------------- the pixel limit


@pytest.mark.parametrize("as_mask", [False, True])
def test_max_pixels_is_passed_through(default_limit, as_mask):
    jpeg = encode(photo(), quality=90)  # 96 x 128 = 12288 pixels
    mask = palette_png(class_map(96, 128))
    for ext, data in (("jpg", jpeg), ("seg.png", mask)):
        with pytest.raises(ImageTooLarge, match="12288 pixels"):
            decode_field(ext, data, max_pixels=12287, as_mask=as_mask)
        assert decode_field(ext, data, max_pixels=12288, as_mask=as_mask).shape[:2] == (96, 128)
        assert decode_field(ext, data, max_pixels=None, as_mask=as_mask).shape[:2] == (96, 128)


@pytest.mark.parametrize("as_mask", [False, True])
def test_default_limit_is_read_at_call_time(default_limit, monkeypatch, as_mask):
    data = palette_png(class_map(96, 128))
    monkeypatch.setenv("TURBOFEED_MAX_PIXELS", "12287")
    with pytest.raises(ImageTooLarge):
        decode_field("png", data, as_mask=as_mask)
    monkeypatch.setenv("TURBOFEED_MAX_PIXELS", "none")
    assert decode_field("png", data, as_mask=as_mask).shape[:2] == (96, 128)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("as_mask", [False, True])
def test_bombs_are_refused_from_the_header(default_limit, as_mask):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Under Pillow's own (2x) check: turbofeed's limit, ImageTooLarge.
    with pytest.raises(ImageTooLarge, match="100000000 pixels"):
        decode_field("seg.png", with_ihdr_size(palette_png(class_map()), 10000, 10000), as_mask=as_mask)
    # Above it Pillow refuses first (as decode reports it): a bad image naming the size.
    with pytest.raises(FieldError, match="^png member .*3600000000 pixels"):
        decode_field("png", with_ihdr_size(palette_png(class_map()), BOMB, BOMB), as_mask=as_mask)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 200  # MiB


# ---------------------------------------------------------------- text, json, cls


def test_txt_is_utf8_text_as_stored():
    text = " A caption — naïve café, 猫 \n"
    assert decode_field("txt", text.encode()) == text
    assert decode_field("caption.txt", memoryview(text.encode())) == text
    assert decode_field("txt", b"") == ""


def test_txt_not_utf8_is_an_error():
    with pytest.raises(FieldError, match="^txt member is not UTF-8: .*0xff") as info:
        decode_field("txt", b"caf\xff")
    assert isinstance(info.value.__cause__, UnicodeDecodeError)
    assert info.value.ext == "txt" and info.value.reason.startswith("is not UTF-8")
    with pytest.raises(FieldError, match="^txt member is not UTF-8"):
        decode_field("txt", "café".encode("latin-1"))


@pytest.mark.parametrize("value", [{"caption": "猫", "width": 640, "nsfw": None, "tags": ["a", 1.5]},
                                   [1, 2, 3], "text", 7, 2.5, True, None])
def test_json_is_the_parsed_value(value):
    assert decode_field("json", json.dumps(value, ensure_ascii=False).encode()) == value


@pytest.mark.parametrize("data, reason", [(b"{'single': 'quotes'}", "is not valid JSON"),
                                          (b"", "is not valid JSON"), (b'{"a": 1', "is not valid JSON"),
                                          (b'{"a": "\xff"}', "is not UTF-8 JSON"),
                                          (b"[" * 100000, "is not valid JSON: nested too deeply")])
def test_json_errors_name_the_extension(data, reason):
    with pytest.raises(FieldError, match=f"^meta.json member {reason}"):
        decode_field("meta.json", data)


@pytest.mark.parametrize("data, value", [(b"7", 7), (b" 42\n", 42), (b"-1", -1), (b"0", 0), (b"999999", 999999)])
def test_cls_is_an_int(data, value):
    out = decode_field("cls", data)
    assert type(out) is int and out == value


@pytest.mark.parametrize("data, reason", [(b"dog", "is not an integer: 'dog'"), (b"1.5", "is not an integer"),
                                          (b"", "is empty"), (b" \n", "is empty"), (b"\xff", "is not UTF-8")])
def test_cls_errors_name_the_extension(data, reason):
    with pytest.raises(FieldError, match=f"^cls member {reason}"):
        decode_field("cls", data)


# ---------------------------------------------------------------- npy


@pytest.mark.parametrize("array", [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
    np.zeros((2, 0, 3), np.uint8),
    np.array(3.5),
    np.array([(1, 2.0), (3, 4.0)], dtype=[("id", "<i4"), ("score", ">f8")]),
    np.array(["ab", "çd"]),
    class_map(),
])
def test_npy_is_the_array(array):
    out = decode_field("npy", npy(array))
    assert isinstance(out, np.ndarray) and out.dtype == array.dtype and out.shape == array.shape
    assert np.array_equal(out, array) and out.flags.writeable
    assert out.flags.f_contiguous == array.flags.f_contiguous
    assert np.array_equal(decode_field("emb.npy", memoryview(npy(array))), array)


def test_npy_errors_name_the_extension():
    good = npy(np.arange(1000, dtype=np.float64))
    cases = {
        "is not a .npy array": [b"", b"hello", npy(np.arange(3))[5:]],
        "holds Python objects": [npy(np.array([{"a": 1}, None], dtype=object))],
        "is truncated: its header declares shape \\(1000,\\) float64 \\(8000 bytes\\), 4000 bytes follow":
            [good[:len(good) - 4000]],
        "is not a readable .npy array": [good[:20]],
    }
    for reason, datas in cases.items():
        for data in datas:
            with pytest.raises(FieldError, match=f"^npy member {reason}"):
                decode_field("npy", data)
    buf = io.BytesIO()
    np.savez(buf, a=np.arange(3))
    with pytest.raises(FieldError, match="^npy member is not a .npy array"):
        decode_field("npy", buf.getvalue())


def test_npy_declaring_a_huge_shape_is_refused_before_allocating():
    data = npy(np.zeros(4, np.float64))
    header = data[:data.index(b"\n") + 1].decode("latin-1")
    # The same header length: pad the shape into the spaces np.save leaves.
    huge = header.replace("(4,)", "(1000000000, 1000000000)")
    huge = huge[:len(header) - 1].ljust(len(header) - 1) + "\n"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(FieldError, match="^npy member is truncated: .*\\(1000000000, 1000000000\\)"):
        decode_field("npy", huge.encode("latin-1") + data[len(header):])
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 50  # MiB


# ---------------------------------------------------------------- everything else


@pytest.mark.parametrize("ext", ["pth", "model.pth", "mp4", "bin", "", "tar.gz", "pickle"])
def test_other_extensions_are_the_raw_bytes(ext):
    payload = bytes(range(256)) * 3
    out = decode_field(ext, payload)
    assert type(out) is bytes and out == payload
    out = decode_field(ext, memoryview(payload))
    assert type(out) is bytes and out == payload


def test_field_types_match_what_comes_back():
    samples = {"jpg": small_jpeg(0), "png": encode(photo(), "PNG"), "txt": b"hi", "json": b'{"a": 1}',
               "cls": b"3", "npy": npy(np.arange(3))}
    for ext, data in samples.items():
        assert isinstance(decode_field(ext, data), FIELD_TYPES[ext])
    assert {"jpg", "jpeg", "png", "webp", "bmp", "ppm", "pgm", "pbm", "tif", "tiff", "gif"} <= set(FIELD_TYPES)
    assert "pth" not in FIELD_TYPES
    with pytest.raises(TypeError):
        FIELD_TYPES["pth"] = bytes


# ---------------------------------------------------------------- user decoders


def test_user_decoder_wins_full_extension_first():
    seen = []

    def record(tag):
        def decoder(data):
            seen.append((tag, type(data), data))
            return tag
        return decoder

    decoders = {"seg.png": record("full"), "png": record("last"), "txt": record("txt")}
    data = palette_png(class_map())
    assert decode_field("seg.png", data, decoders) == "full"
    assert decode_field("png", data, decoders) == "last"
    assert decode_field("depth.png", data, decoders) == "last"
    assert decode_field("a.seg.png", data, decoders) == "full"  # the most specific suffix present
    assert decode_field("txt", memoryview(b"x"), decoders) == "txt"  # over the built-in too
    assert all(t is bytes for _, t, _ in seen) and seen[-1][2] == b"x"
    assert decode_field("jpg", small_jpeg(0), decoders).shape == (32, 32, 3)  # no match: built-in
    assert decode_field("cls", b"4", {}) == 4 and decode_field("cls", b"4", None) == 4


def test_user_decoder_bytes_keeps_images_encoded():
    data = small_jpeg(2)
    assert decode_field("jpg", data, {"jpg": bytes}) == data


def test_user_decoder_errors_name_the_decoder_and_extension():
    def load_mask(data: bytes):
        raise KeyError("palette")

    with pytest.raises(FieldError, match="^seg.png member failed in user decoder .*load_mask "
                                         "\\(for 'png'\\): KeyError: 'palette'") as info:
        decode_field("seg.png", b"...", {"png": load_mask})
    assert isinstance(info.value.__cause__, KeyError) and info.value.ext == "seg.png"
    with pytest.raises(FieldError, match="^cls member failed in user decoder int \\(for 'cls'\\): ValueError"):
        decode_field("cls", b"x", {"cls": int})
