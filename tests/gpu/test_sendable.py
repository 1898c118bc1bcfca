"""What turbofeed's GPU decoder sends to nvJPEG, and how a failing batch is split: both run
without a GPU (the decoder itself needs one: tests/gpu/test_on_gpu.py)."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from turbofeed.decode.gpu import decode_bisecting, sendable


def test_jpegs_nvjpeg_takes_are_sent(odd_images):
    for kind in ("rgb", "gray", "progressive"):
        assert sendable(odd_images[kind], 0), kind


@pytest.mark.parametrize("mode", ["CMYK"])
def test_cmyk_is_kept_from_the_gpu(mode):
    """On an H100, one CMYK JPEG failed torchvision's whole batched nvJPEG call."""
    out = io.BytesIO()
    Image.new(mode, (32, 24)).save(out, "JPEG")
    assert not sendable(out.getvalue(), 0)


def test_what_is_not_a_readable_jpeg_is_not_sent(odd_images):
    png = io.BytesIO()
    Image.new("RGB", (8, 8)).save(png, "PNG")
    for data in (b"", b"\xff\xd8", b"\xff\xd8\xff\xe0garbage", b"not a jpeg", png.getvalue()):
        assert not sendable(data, 0), data[:12]


def test_an_image_over_the_pixel_limit_is_not_sent(odd_images):
    data = odd_images["rgb"]
    assert sendable(data, 10**9)
    assert not sendable(data, 16)


class FailsAsAWhole:
    """Stands in for torchvision's batched nvJPEG call (no GPU here): it decodes a list or
    raises for all of it when one item is bad, as the library documents."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, items: list[bytes]) -> list[str]:
        self.calls.append(len(items))
        if b"bad" in items:
            raise RuntimeError("Error while decoding JPEG images")
        return [item.decode() for item in items]


def test_one_bad_item_is_found_by_halving():
    items = [str(i).encode() for i in range(256)]
    items[37] = b"bad"
    decode = FailsAsAWhole()
    out = decode_bisecting(decode, items)
    assert out[37] is None
    assert out[:37] + out[38:] == [str(i) for i in range(256) if i != 37]
    assert len(decode.calls) <= 2 * 8 + 1  # not one call per image (257)


def test_a_good_batch_is_one_call_and_an_empty_one_none():
    decode = FailsAsAWhole()
    assert decode_bisecting(decode, [b"1", b"2"]) == ["1", "2"] and decode.calls == [2]
    assert decode_bisecting(decode, []) == [] and decode.calls == [2]


def test_every_item_bad():
    decode = FailsAsAWhole()
    assert decode_bisecting(decode, [b"bad"] * 5) == [None] * 5


def test_the_byte_tensors_for_nvjpeg_are_each_image_whole_in_one_buffer(odd_images):
    """encoded_tensors: what torchvision's decode_jpeg gets, one 1-D uint8 CPU tensor per
    image holding exactly its bytes (nvJPEG reads data_ptr() and numel()), all views of
    one buffer."""
    import torch

    from turbofeed.decode.gpu import encoded_tensors

    datas = [odd_images["rgb"], odd_images["gray"], odd_images["progressive"], memoryview(odd_images["rgb"])]
    tensors = encoded_tensors(datas)
    assert len(tensors) == len(datas)
    base = tensors[0].untyped_storage().data_ptr()
    offset = 0
    for data, t in zip(datas, tensors):
        assert t.dtype == torch.uint8 and t.dim() == 1 and t.is_contiguous() and t.device.type == "cpu"
        assert t.untyped_storage().data_ptr() == base and t.data_ptr() == base + offset  # one buffer
        assert t.numpy().tobytes() == data
        offset += len(data)


def test_the_feeding_threads_header_reader_gives_probes_size_or_leaves_it_to_probe(odd_images):
    """engine.gpu.jpeg_size (the native header reader, per sample in the feeding threads)
    gives the size probe() gives for every JPEG, and None where probe() must decide."""
    from turbofeed.decode import native, probe
    from turbofeed.engine.gpu import jpeg_size

    if not native.available():
        pytest.skip("the native extension is not built")
    for kind in ("rgb", "gray", "cmyk", "progressive", "truncated"):
        info = probe(odd_images[kind])
        assert jpeg_size(odd_images[kind]) == (info.height, info.width), kind
    for kind in ("png_rgba", "png_palette", "empty", "garbage"):
        assert jpeg_size(odd_images[kind]) is None, kind
    assert jpeg_size(memoryview(odd_images["rgb"])) is None  # not bytes: probe() reads it


def test_an_item_the_backend_cannot_parse_is_left_out_not_the_batch():
    """decode_parsed (nvImageCodec's path, gpu-review C2): each item is parsed on its own
    (nvImageCodec's CodeStream(bytes) raises "Failed to get image info" for data it cannot
    read, verified on the 0.9 wheel; it needs a GPU to decode, so a plain function stands
    in for the parse and FailsAsAWhole for the batched decode): the others are decoded in
    one call."""
    from turbofeed.decode.gpu import decode_parsed

    def parse(item: bytes) -> bytes:
        if not item.startswith(b"ok"):
            raise RuntimeError("Failed to get image info")
        return item[2:]

    decode = FailsAsAWhole()
    items = [b"ok1", b"garbage", b"ok2", b"", b"ok3"]
    assert decode_parsed(parse, decode, items) == ["1", None, "2", None, "3"]
    assert decode.calls == [3]  # one call for the three parsed items
    decode = FailsAsAWhole()
    assert decode_parsed(parse, decode, [b"ok1", b"okbad", b"x"]) == ["1", None, None]  # bad in decode: halved
    assert decode_parsed(parse, FailsAsAWhole(), [b"x", b""]) == [None, None]


def test_nvimgcodec_decoder_is_asked_for_a_few_cpu_threads(monkeypatch):
    """gpu-review C9: nvImageCodec's Decoder starts one CPU thread per core unless told,
    on top of the loader's threads. nvImageCodec is not installed here and needs a GPU,
    so a module recording the Decoder's arguments stands in for it."""
    import sys
    import types

    import torch

    from turbofeed.decode.gpu import NVIMGCODEC_CPU_THREADS, GpuDecoder

    made: list[dict] = []
    fake = types.ModuleType("nvidia.nvimgcodec")
    fake.Decoder = lambda **kwargs: made.append(kwargs) or object()  # type: ignore[attr-defined]
    fake.ColorSpec = types.SimpleNamespace(SRGB="srgb")  # type: ignore[attr-defined]
    fake.DecodeParams = lambda **kwargs: kwargs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", fake)
    monkeypatch.setitem(sys.modules, "nvidia", types.SimpleNamespace(nvimgcodec=fake))
    decoder = object.__new__(GpuDecoder)
    decoder.device = torch.device("cuda", 0)
    decoder._open_nvimgcodec()
    assert made == [{"device_id": 0, "max_num_cpu_threads": NVIMGCODEC_CPU_THREADS,
                     "options": ":fancy_upsampling=1"}]
    assert 1 <= NVIMGCODEC_CPU_THREADS <= 8
