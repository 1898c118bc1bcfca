"""User callables after turbofeed's fused ops: they run per sample in the worker threads
on the fused decode's output, on the native (JPEG) and the general (PNG) decode paths;
``batch_transform`` runs once per delivered batch. (One that raises: tests/engine/test_user_code.py.)"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import turbofeed
from builders import small_jpeg, write_tar
from turbofeed import transforms as T


def invert(x: torch.Tensor) -> torch.Tensor:
    return 255 - x


def png(seed: int, size: tuple[int, int] = (40, 48)) -> bytes:
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def jpeg_and_png_shards(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("callables")
    shards = {}
    for kind, make in (("jpg", small_jpeg), ("png", png)):
        members = []
        for i in range(24):
            members += [(f"{kind}{i:03d}.{kind}", make(seed=i)), (f"{kind}{i:03d}.cls", str(i % 5).encode())]
        shards[kind] = write_tar(str(root / f"{kind}.tar"), members)
    return shards


def epoch(loader) -> list:
    return [(x.clone() if isinstance(x, torch.Tensor) else x, y.clone(), k) for x, y, k in loader]


@pytest.mark.parametrize("kind", ["jpg", "png"])  # native crop decode, and the general (Pillow) path
def test_callables_run_on_exactly_the_fused_output(jpeg_and_png_shards, kind):
    kw = dict(batch_size=8, num_workers=2, shuffle=True, seed=4, return_keys=True)
    fused = [T.RandomResizedCrop(24), T.RandomHorizontalFlip()]
    plain = epoch(turbofeed.DataLoader(jpeg_and_png_shards[kind], transform=T.Compose(fused), **kw))
    with_fn = epoch(turbofeed.DataLoader(jpeg_and_png_shards[kind], transform=T.Compose([*fused, invert]), **kw))
    assert len(plain) == len(with_fn) == 3
    for (px, py, pk), (fx, fy, fk) in zip(plain, with_fn):
        assert pk == fk and torch.equal(py, fy)
        assert fx.shape == (8, 3, 24, 24) and fx.dtype == torch.uint8
        assert torch.equal(fx, 255 - px)  # the same windows and flips, pixel for pixel


def test_normalize_after_a_callable_equals_the_fused_normalize(jpeg_and_png_shards):
    kw = dict(batch_size=8, num_workers=2, shuffle=True, seed=1)
    fused = [x for x, _ in turbofeed.DataLoader(jpeg_and_png_shards["jpg"], transform=T.Compose(
        [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.Normalize()]), **kw)]
    after = [x for x, _ in turbofeed.DataLoader(jpeg_and_png_shards["jpg"], transform=T.Compose(
        [T.RandomResizedCrop(24), T.RandomHorizontalFlip(), lambda x: x, T.Normalize()]), **kw)]
    assert all(a.dtype == torch.float32 and torch.equal(a, b) for a, b in zip(after, fused))


def test_a_callable_alone_sees_the_whole_decoded_image(jpeg_and_png_shards):
    seen = []

    def record(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return x[:, :10]

    loader = turbofeed.DataLoader(jpeg_and_png_shards["png"], batch_size=6, num_workers=2, transform=record)
    images, labels = next(iter(loader))
    assert set(seen) >= {(3, 40, 48)} and images.shape == (6, 3, 10, 48) and len(labels) == 6


def test_outputs_of_different_shapes_come_as_a_list(jpeg_and_png_shards):
    def ragged(x: torch.Tensor) -> torch.Tensor:
        return x[:, : 5 + int(x.float().mean()) % 7]

    images, labels = next(iter(turbofeed.DataLoader(jpeg_and_png_shards["jpg"], batch_size=8, num_workers=2,
                                                    transform=ragged)))
    assert isinstance(images, list) and len(images) == len(labels) == 8
    assert len({tuple(i.shape) for i in images}) > 1


def test_batch_transform_runs_once_per_batch_on_the_delivered_batch(jpeg_and_png_shards):
    calls = []

    def mixup(images: torch.Tensor, labels: torch.Tensor):
        calls.append(images.shape[0])
        mixed = (images.float() + images.flip(0).float()) / 2
        return mixed, torch.nn.functional.one_hot(labels, 5).float()

    loader = turbofeed.DataLoader(jpeg_and_png_shards["jpg"], batch_size=8, num_workers=2,
                                  transform=T.imagenet_eval(16), batch_transform=mixup)
    out = list(loader)
    assert calls == [8, 8, 8]
    assert all(x.dtype == torch.float32 and y.shape == (8, 5) for x, y in out)
    only_images = turbofeed.DataLoader(jpeg_and_png_shards["jpg"], batch_size=8, num_workers=2,
                                       transform=T.imagenet_eval(16), batch_transform=lambda x, y: x // 2)
    x, y = next(iter(only_images))
    assert int(x.max()) <= 127 and y.dtype == torch.int64


def test_the_pipeline_refuses_callables_with_a_clear_error(jpeg_and_png_shards):
    with pytest.raises(ValueError, match="DataLoader, which runs callables"):
        turbofeed.Pipeline(jpeg_and_png_shards["jpg"], transform=[T.CenterCrop(16), invert])
