"""transforms.geometry and Compose: crop windows follow torchvision's parameter semantics
(RandomResizedCrop.get_params, Resize's short side with truncation, CenterCrop's round),
and a recipe composes into one source box."""

from __future__ import annotations

import math

import numpy as np
import pytest

from turbofeed.transforms import (CenterCrop, Compose, Draws, Normalize, RandomHorizontalFlip,
                                  RandomResizedCrop, Resize, ToDtype)


@pytest.mark.parametrize("height,width", [(375, 500), (500, 333), (224, 224), (600, 260)])
def test_random_resized_crop_stays_in_bounds_scale_and_ratio(height, width):
    """Each crop lies inside the image, and its size is a rounding of sqrt(area * ratio),
    sqrt(area / ratio) with area in scale and ratio in range: the bounds below widen the
    ranges by exactly that half-pixel rounding. (Fallback crops satisfy them too.)"""
    op = RandomResizedCrop(224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
    for gid in range(300):
        top, left, h, w = op.params(height, width, Draws(0, 0, gid))
        assert 0 <= top and top + h <= height and 0 <= left and left + w <= width
        assert h > 0 and w > 0
        assert (w + 0.5) * (h + 0.5) >= 0.08 * height * width
        assert (w - 0.5) * (h - 0.5) <= 1.0 * height * width
        assert (w + 0.5) / (h - 0.5) >= 3 / 4 and (w - 0.5) / (h + 0.5) <= 4 / 3


def test_random_resized_crop_distribution():
    """On an image large enough that no draw is rejected, the area fraction is uniform in
    scale, log(ratio) uniform in log(ratio range), the offsets uniform over the slack."""
    op = RandomResizedCrop(224, scale=(0.1, 0.5))
    draws = np.array([op.params(1000, 1000, Draws(1, 0, gid)) for gid in range(3000)], dtype=np.float64)
    top, left, h, w = draws.T
    area = h * w / 1e6
    assert abs(area.mean() - 0.3) < 0.01 and area.min() > 0.098 and area.max() < 0.502
    assert abs(np.quantile(area, 0.25) - 0.2) < 0.015 and abs(np.quantile(area, 0.75) - 0.4) < 0.015
    log_ratio = np.log(w / h)
    assert abs(log_ratio.mean()) < 0.015 and log_ratio.min() > math.log(3 / 4) - 0.01
    assert abs(log_ratio.std() - 2 * math.log(4 / 3) / math.sqrt(12)) < 0.01  # uniform's std
    assert abs((top / (1000 - h)).mean() - 0.5) < 0.03
    assert abs((left / (1000 - w)).mean() - 0.5) < 0.03


@pytest.mark.parametrize("height,width", [(10, 1000), (1000, 10)])
def test_random_resized_crop_falls_back_to_a_centred_clamped_ratio(height, width):
    """No draw fits an extreme aspect: torchvision's fallback keeps the short side and
    clamps the ratio to the range (w = round(h * 4/3) or h = round(w / (3/4))), centred."""
    top, left, h, w = RandomResizedCrop(224).params(height, width, Draws(0, 0, 0))
    if width > height:
        assert (h, w) == (height, round(height * 4 / 3)) and (top, left) == (0, (width - w) // 2)
    else:
        assert (h, w) == (round(width / (3 / 4)), width) and (top, left) == ((height - h) // 2, 0)


def test_random_resized_crop_is_deterministic_per_seed():
    op = RandomResizedCrop(224)

    def draw(seed):
        return [op.params(375, 500, Draws(seed, 0, gid)) for gid in range(20)]

    assert draw(5) == draw(5)
    assert draw(5) != draw(6)


def test_random_resized_crop_window_is_its_params_box():
    """As the first op, the window is the integer crop box in source pixels."""
    t = Compose([RandomResizedCrop((160, 200))])
    top, left, h, w = RandomResizedCrop((160, 200)).params(375, 500, Draws(3, 0, 0))
    win = t.window(375, 500, Draws(3, 0, 0))
    assert win.box == (left, top, left + w, top + h) and (win.height, win.width) == (160, 200)


@pytest.mark.parametrize("height,width,expected", [
    (375, 500, (256, 341)),   # 256 * 500 / 375 = 341.33
    (300, 451, (256, 384)),   # 384.85 is truncated, not rounded, as torchvision does
    (451, 300, (384, 256)),
    (300, 300, (256, 256)),
])
def test_resize_int_sets_the_short_side(height, width, expected):
    win = Compose([Resize(256)]).window(height, width, Draws(0, 0, 0))
    assert (win.height, win.width) == expected
    assert win.box == (0, 0, width, height)


def test_resize_pair_sets_both_sides():
    win = Compose([Resize((100, 300))]).window(375, 500, Draws(0, 0, 0))
    assert (win.height, win.width, win.box) == (100, 300, (0, 0, 500, 375))


@pytest.mark.parametrize("height,width", [(256, 341), (255, 300), (300, 257), (224, 224)])
def test_center_crop_offsets_use_round(height, width):
    """top = round((h - 224) / 2), left likewise (Python's round, as torchvision)."""
    win = Compose([CenterCrop(224)]).window(height, width, Draws(0, 0, 0))
    top, left = round((height - 224) / 2), round((width - 224) / 2)
    assert win.box == (left, top, left + 224, top + 224)


def test_center_crop_larger_than_the_image_takes_all_of_it():
    win = Compose([CenterCrop(224)]).window(100, 150, Draws(0, 0, 0))
    assert win.box == (0, 0, 150, 100) and (win.height, win.width) == (224, 224)


def test_resize_then_center_crop_is_one_source_box():
    """Resize(256) + CenterCrop(224) of 375x500: the 224 crop at (16, 58) of the 256x341
    resized view, mapped back to source pixels by the resize factors."""
    win = Compose([Resize(256), CenterCrop(224)]).window(375, 500, Draws(0, 0, 0))
    sx, sy = 500 / 341, 375 / 256
    assert np.allclose(win.box, (58 * sx, 16 * sy, (58 + 224) * sx, (16 + 224) * sy), atol=1e-9)
    assert (win.height, win.width, win.flip) == (224, 224, False)


def test_output_op_only_last():
    assert Compose([CenterCrop(224), Normalize()]).output is not None
    assert Compose([CenterCrop(224)]).output is None
    with pytest.raises(ValueError, match="last"):
        Compose([Normalize(), CenterCrop(224)])
    with pytest.raises(ValueError, match="last"):
        Compose([ToDtype(), RandomHorizontalFlip()])


def test_callables_follow_the_fused_ops_and_other_objects_are_refused():
    class TorchvisionLike:
        def __call__(self, img):
            return img

    for op in (TorchvisionLike(), lambda img: img):
        composed = Compose([Resize(256), CenterCrop(224), op, Normalize()])
        assert composed.callables[0] is op and isinstance(composed.callables[1], Normalize)
        assert composed.size is None and composed.fused_size == (224, 224) and composed.output is None
    with pytest.raises(TypeError, match="not a turbofeed transform nor a callable"):
        Compose([Resize(256), "flip"])
    with pytest.raises(ValueError, match="must come first"):
        Compose([Resize(256), lambda img: img, CenterCrop(224)])


@pytest.mark.parametrize("ops,size", [
    ([RandomResizedCrop(224), RandomHorizontalFlip()], (224, 224)),
    ([Resize(256)], None),
    ([Resize((100, 200))], (100, 200)),
    ([Resize(256), CenterCrop((224, 192))], (224, 192)),
    ([CenterCrop(224), Resize(256)], None),
    ([], None),
])
def test_compose_size(ops, size):
    assert Compose(ops).size == size


def _flip_rate(ops, draws=2000):
    t = Compose(ops)
    return np.mean([t.window(100, 100, Draws(0, 0, gid)).flip for gid in range(draws)])


def test_flips_compose_like_applying_them_in_turn():
    """Flipped iff an odd number of flips fire: two certain flips cancel, two coin flips
    still give one half."""
    assert _flip_rate([RandomHorizontalFlip(1.0)]) == 1.0
    assert _flip_rate([RandomHorizontalFlip(0.0)]) == 0.0
    assert _flip_rate([RandomHorizontalFlip(1.0), RandomHorizontalFlip(1.0)]) == 0.0
    assert abs(_flip_rate([RandomHorizontalFlip()]) - 0.5) < 0.05
    assert abs(_flip_rate([RandomHorizontalFlip(), RandomHorizontalFlip()]) - 0.5) < 0.05
    assert abs(_flip_rate([RandomHorizontalFlip(0.2)]) - 0.2) < 0.05
    assert not Compose([RandomHorizontalFlip(1.0), RandomHorizontalFlip(1.0)]).random


def test_invalid_ranges():
    with pytest.raises(ValueError):
        RandomResizedCrop(224, scale=(0.9, 0.1))
    with pytest.raises(ValueError):
        RandomResizedCrop(224, ratio=(2.0, 0.5))
