"""One output op, two implementations: ``write_slot`` (NumPy) and ``batched.normalize``
(torch) compute ``(x - offset) * factor`` in float32 rounded once to the output dtype, so
they give the same bits as each other and as the native decoder's normalised output, on a
real JPEG, in both layouts, for every output dtype."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest

from builders import encode, photo
from turbofeed import transforms as T
from turbofeed.decode import native, probe

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not native.available(), reason="turbofeed.decode._crop is not built")

from turbofeed.torch.device import apply_output  # noqa: E402
from turbofeed.transforms.batched import normalize, resized_crop  # noqa: E402

SPECS = {
    "normalize-float32": T.Normalize(),
    "normalize-float16": T.Normalize(dtype="float16"),
    "other-mean-float16": T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3), dtype="float16"),
    "todtype-float16": T.ToDtype("float16"),
    "todtype-float32": T.ToDtype("float32"),
    "unscaled-float16": T.ToDtype("float16", scale=False),
    "normalize-float64": T.Normalize(dtype="float64"),
    "normalize-bfloat16": T.Normalize(dtype="bfloat16"),
}


@pytest.fixture(scope="module")
def jpegs(shard_paths) -> list[bytes]:
    """Two real JPEGs: an ImageNet-like photo from the test shards, and a generated one."""
    with tarfile.open(shard_paths[0]) as tar:
        first = next(tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".jpg"))
    return [first, encode(photo(120, 160, seed=3), quality=90)]


def _window(data: bytes, seed: int) -> T.Window:
    info = probe(data)
    recipe = T.Compose([T.RandomResizedCrop(72), T.RandomHorizontalFlip(1.0)])
    return recipe.window(info.height, info.width, T.Draws(seed, 0, 0))


def _as_numpy(t):
    """A torch result as the host buffer holds it (bfloat16: float32 on the host)."""
    return t.to(torch.float32).numpy() if t.dtype == torch.bfloat16 else t.numpy()


@pytest.mark.parametrize("channels_first", [True, False], ids=["chw", "hwc"])
@pytest.mark.parametrize("name", list(SPECS))
def test_numpy_torch_and_native_give_the_same_bits(jpegs, name, channels_first):
    spec = SPECS[name].spec
    torch_dtype = getattr(torch, spec.torch_dtype)
    for i, data in enumerate(jpegs):
        window = _window(data, i)
        shape = (3, 72, 72) if channels_first else (72, 72, 3)
        # the uint8 pixels every implementation starts from: the native crop, not flipped
        pixels = np.empty((72, 72, 3), np.uint8)
        native.crop_resize(data, window.box, pixels, channels_first=False)

        # native: float32 straight from the decoder, rounded once to the output dtype
        native_f32 = np.empty(shape, np.float32)
        native.crop_resize(data, window.box, native_f32, flip=True, channels_first=channels_first,
                           offset=spec.offset, factor=spec.factor)
        expected = torch.from_numpy(native_f32).to(torch_dtype)

        # NumPy: write_slot into a host buffer of spec.dtype (bfloat16: float32, cast on delivery)
        host = np.empty(shape, spec.dtype)
        T.write_slot(pixels, host, flip=True, channels_first=channels_first, output=spec)
        assert torch.equal(torch.from_numpy(host).to(torch_dtype), expected), name
        if not channels_first:
            assert np.array_equal(T.hwc_pixels(pixels, flip=True, output=spec), host)

        # torch: one image and a batch, uint8 in, spec.torch_dtype out
        flipped = np.ascontiguousarray(pixels[:, ::-1])
        image = torch.from_numpy(flipped.transpose(2, 0, 1).copy() if channels_first else flipped)
        got = normalize(image, spec, channels_first=channels_first)
        assert got.dtype == torch_dtype and torch.equal(got, expected), name
        batch = normalize(image[None], spec, channels_first=channels_first)
        assert torch.equal(batch[0], expected)
        assert torch.equal(apply_output(image[None], spec, channels_first), batch)
        assert np.array_equal(_as_numpy(got), _as_numpy(expected))


def test_channels_last_memory_and_the_batched_resize_use_the_same_normalisation(jpegs):
    """An NCHW-shaped view of NHWC memory (the loader's channels_last) normalises to the
    same values; the batched resize's float output goes through the same function."""
    spec = T.Normalize(dtype="float16").spec
    pixels = np.empty((2, 64, 64, 3), np.uint8)
    for k, data in enumerate(jpegs):
        native.crop_resize(data, _window(data, k).box, pixels[k], channels_first=False)
    nhwc = torch.from_numpy(pixels)
    nchw = nhwc.permute(0, 3, 1, 2).contiguous()
    assert torch.equal(normalize(nhwc.permute(0, 3, 1, 2), spec), normalize(nchw, spec))
    assert torch.equal(normalize(nhwc, spec, channels_first=False).permute(0, 3, 1, 2), normalize(nchw, spec))

    sizes = torch.tensor([[64.0, 64.0]] * 2)
    boxes = torch.tensor([[0.0, 0.0, 64.0, 64.0]] * 2)  # identity resize: the pixels themselves
    out = resized_crop(nchw, sizes, boxes, (64, 64), torch.tensor([False, True]), spec)
    plain = resized_crop(nchw, sizes, boxes, (64, 64), torch.tensor([False, True]))
    assert torch.equal(out, normalize(plain, spec))


def test_transforms_import_no_torch():
    """``turbofeed.transforms`` (output ops included) stays importable without torch: only
    ``transforms.batched`` imports it."""
    import subprocess
    import sys

    code = ("import sys; import turbofeed.transforms as T; T.Normalize(dtype='float16'); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_constants_go_to_the_device_in_one_copy(monkeypatch):
    """gpu-review S8: ``normalize`` made two pageable host-to-device copies per batch (each
    a wait for the device's queued work); now one six-value table through ``to_device``
    (pinned, non-blocking on CUDA). No GPU here: a recorder stands in for ``to_device``."""
    from turbofeed.transforms import batched

    copies = []

    def recorded(tensor, device):
        copies.append((tuple(tensor.shape), tensor.dtype, tensor.device.type, torch.device(device)))
        return tensor.to(device)

    monkeypatch.setattr(batched, "to_device", recorded)
    spec = T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3), dtype="float16").spec
    images = torch.arange(2 * 3 * 4 * 5, dtype=torch.uint8).view(2, 3, 4, 5)
    out = normalize(images, spec)
    assert copies == [((6,), torch.float32, "cpu", torch.device("cpu"))]
    want = ((images.float() - torch.tensor(spec.offset).view(3, 1, 1)) * torch.tensor(spec.factor).view(3, 1, 1))
    assert out.dtype == torch.float16 and torch.equal(out, want.to(torch.float16))
    hwc = normalize(images.permute(0, 2, 3, 1), spec, channels_first=False)
    assert len(copies) == 2 and torch.equal(hwc, out.permute(0, 2, 3, 1))
