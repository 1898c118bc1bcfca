"""transforms.draws and the array form of the geometric ops: draws are a pure function of
(seed, epoch, sample id, column); ``Compose.windows`` (a chunk, NumPy) gives the windows
``Compose.window`` (one sample, pure Python) gives, to the bit, whatever the chunk; and
RandomResizedCrop keeps torchvision's semantics and distribution."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from turbofeed.transforms import (BucketResize, CenterCrop, Compose, Draws, RandomHorizontalFlip, RandomResizedCrop,
                                  Resize, Window, Windows, imagenet_eval, imagenet_train, uniforms)
from turbofeed.transforms.geometry import GeometricOp
from turbofeed.transforms.views import View, Views

M64 = (1 << 64) - 1


def _splitmix64(state: int):
    """The textbook generator (Steele, Lea, Flood 2014): each call adds the golden gamma
    and returns the finalised state."""
    while True:
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        yield z ^ (z >> 31)


def test_a_draw_is_the_kth_output_of_splitmix64_from_the_samples_key():
    for seed, epoch, gid in [(0, 0, 0), (3, 1, 12345), (2**70 + 5, -1, -7), (-1, 2**64 - 1, 2**63)]:
        draws = Draws(seed, epoch, gid)
        stream = _splitmix64(draws.key)
        assert [draws[k] for k in range(30)] == [(next(stream) >> 11) * 2.0**-53 for _ in range(30)]
        assert draws.shifted(7)[3] == draws[10] and draws.shifted(7).shifted(2)[0] == draws[9]


def test_draws_are_pinned():
    """The numbers themselves: a change here changes every crop (bump the resume state)."""
    assert Draws(0, 0, 0).key == 0x33FE_8BD4_F9C5_7863
    assert [Draws(0, 0, 0)[k].hex() for k in range(3)] == ["0x1.67404d700e558p-3", "0x1.e492b03fb5a32p-2",
                                                           "0x1.4ed9bbf709f7dp-1"]
    assert Draws(7, 3, 2**40)[22].hex() == "0x1.62cbe600e3aa8p-1"


def test_seed_epoch_and_gid_are_taken_modulo_2_64():
    assert Draws(-1, 0, 5)[0] == Draws(M64, 0, 5)[0] == Draws(2**65 - 1, 0, 5)[0]
    assert Draws(1, -2, -3)[4] == Draws(1, M64 - 1, M64 - 2)[4]
    assert Draws(1, 2, 3)[0] not in (Draws(2, 1, 3)[0], Draws(1, 3, 2)[0], Draws(3, 2, 1)[0])


def test_uniforms_equals_the_scalar_draws_bit_for_bit():
    rng = np.random.default_rng(0)
    gids = np.concatenate([rng.integers(-2**63, 2**63 - 1, 3000, dtype=np.int64), [0, -1, 2**63 - 1, -2**63]])
    for seed, epoch in [(0, 0), (12345, 7), (-5, 2**66 + 3)]:
        got = uniforms(seed, epoch, gids, 25)
        assert got.shape == (len(gids), 25) and got.dtype == np.float64
        want = np.array([[Draws(seed, epoch, int(g))[k] for k in range(25)] for g in gids])
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
        # uint64 ids are the same ids
        assert np.array_equal(uniforms(seed, epoch, gids.view(np.uint64), 3), got[:, :3])


def test_uniforms_do_not_depend_on_the_chunk_nor_the_column_count():
    gids = np.arange(1000, 1200)
    whole = uniforms(9, 4, gids, 23)
    order = np.random.default_rng(1).permutation(200)
    assert np.array_equal(uniforms(9, 4, gids[order], 23), whole[order])
    assert np.array_equal(np.concatenate([uniforms(9, 4, gids[i:i + 17], 23) for i in range(0, 200, 17)]), whole)
    assert np.array_equal(uniforms(9, 4, gids, 5), whole[:, :5])
    assert uniforms(9, 4, np.zeros(0, np.int64), 23).shape == (0, 23)


def test_uniforms_look_uniform_and_independent():
    """In [0, 1), mean 1/2, variance 1/12, every decile near a tenth, neighbouring columns
    and neighbouring ids uncorrelated (1M draws: bounds at about 5 standard errors)."""
    u = uniforms(0, 0, np.arange(40_000), 25)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.0015 and abs(u.var() - 1 / 12) < 0.0008
    counts = np.histogram(u, bins=10, range=(0, 1))[0] / u.size
    assert np.abs(counts - 0.1).max() < 0.0015
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.025
    assert abs(np.corrcoef(u[:-1, 0], u[1:, 0])[0, 1]) < 0.025
    assert abs(np.corrcoef(uniforms(0, 0, np.arange(40_000), 1)[:, 0], uniforms(0, 1, np.arange(40_000), 1)[:, 0])[0, 1]) \
        < 0.025


# --- scalar and array forms -------------------------------------------------------------

RECIPES = {
    "train": imagenet_train(224),
    "eval": imagenet_eval(224),
    "rrc-scale-above-1": Compose([RandomResizedCrop((96, 128), scale=(0.5, 2.5)), RandomHorizontalFlip(0.3)]),
    "rrc-extreme-ratio": Compose([RandomResizedCrop(64, scale=(0.001, 0.01), ratio=(0.05, 20.0))]),
    "rrc-fixed-ratio": Compose([RandomResizedCrop(32, scale=(0.9, 1.0), ratio=(2.0, 2.0))]),
    "resize-rrc-crop": Compose([Resize(97), RandomResizedCrop(80, scale=(0.2, 1.3)), CenterCrop((61, 50)),
                                RandomHorizontalFlip(), RandomHorizontalFlip(0.7)]),
    "crop-resize": Compose([CenterCrop((300, 41)), Resize(77)]),
    "resize-pair-two-rrc": Compose([Resize((120, 333)), RandomResizedCrop(90), RandomResizedCrop((20, 30))]),
    "buckets": Compose([BucketResize(), RandomHorizontalFlip()]),
    "bucket-ratios-crop": Compose([BucketResize([0.5, 1.0, 1.7, 3.0], area=300 * 300, multiple=8), CenterCrop(200)]),
    "nothing": Compose([]),
}


def _sizes(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Image sizes of every kind: tiny (1x1, 1xN, Nx1), ImageNet-like, huge, extreme
    aspect ratios, log-uniform over 1 .. 2**20 per side."""
    kind = rng.integers(0, 6, n)
    h = np.exp(rng.uniform(0, math.log(2**20), n)).astype(np.int64)
    w = np.exp(rng.uniform(0, math.log(2**20), n)).astype(np.int64)
    h = np.where(kind == 0, rng.integers(1, 5, n), h)
    w = np.where(kind == 0, rng.integers(1, 5, n), w)
    h = np.where(kind == 1, 1, h)  # 1 x N
    w = np.where(kind == 2, 1, w)  # N x 1
    h = np.where(kind == 3, rng.integers(200, 800, n), h)
    w = np.where(kind == 3, rng.integers(200, 800, n), w)
    return np.maximum(h, 1), np.maximum(w, 1)


def _scalar(recipe: Compose, heights, widths, seed, epoch, gids) -> Windows:
    chosen = [recipe.window(int(h), int(w), Draws(seed, epoch, int(g))) for h, w, g in zip(heights, widths, gids)]
    return Windows(np.array([c.box for c in chosen], np.float64).reshape(-1, 4),
                   np.array([c.height for c in chosen], np.int64), np.array([c.width for c in chosen], np.int64),
                   np.array([c.flip for c in chosen], bool))


def _assert_same(got: Windows, want: Windows) -> None:
    assert got.boxes.dtype == np.float64 and got.boxes.shape == want.boxes.shape
    assert got.height.dtype == got.width.dtype == np.int64 and got.flips.dtype == bool
    bad = np.flatnonzero((got.boxes.view(np.uint64) != want.boxes.view(np.uint64)).any(axis=1)
                         | (got.height != want.height) | (got.width != want.width) | (got.flips != want.flips))
    assert bad.size == 0, f"{bad.size} differ, first: {got[int(bad[0])]} != {want[int(bad[0])]}"


@pytest.mark.parametrize("name", list(RECIPES))
def test_windows_equal_window_to_the_bit(name):
    """200k cases over the recipes (about 18k each): the chunk form gives the scalar form's
    boxes, sizes and flips bit for bit, in chunks of every length."""
    recipe = RECIPES[name]
    assert recipe.vectorized
    rng = np.random.default_rng(len(name))
    n = 18_200
    heights, widths = _sizes(rng, n)
    gids = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    seed, epoch = int(rng.integers(0, 2**63)), int(rng.integers(0, 100))
    want = _scalar(recipe, heights, widths, seed, epoch, gids)
    _assert_same(recipe.windows(heights, widths, seed, epoch, gids), want)
    start = 0
    for length in (1, 2, 16, 64, 63, 1000):
        got = recipe.windows(heights[start:start + length], widths[start:start + length], seed, epoch,
                             gids[start:start + length])
        _assert_same(got, Windows(want.boxes[start:start + length], want.height[start:start + length],
                                  want.width[start:start + length], want.flips[start:start + length]))
        start += length


@pytest.mark.parametrize("height,width", [(1, 1), (1, 2), (2, 1), (1, 1000), (1000, 1), (3, 5), (7, 7),
                                          (65535, 65535), (2**20, 3), (10, 1000), (1000, 10), (224, 224)])
def test_edge_sizes_agree(height, width):
    gids = np.arange(300)
    heights, widths = np.full(300, height), np.full(300, width)
    for recipe in RECIPES.values():
        _assert_same(recipe.windows(heights, widths, 5, 1, gids), _scalar(recipe, heights, widths, 5, 1, gids))


def test_resize_int_truncates_and_center_crop_rounds_half_to_even_in_both_forms():
    """Resize: 300x451 -> 384.85 truncated to 384 (torchvision). CenterCrop: an odd margin
    halves to x.5, which Python's round and np.rint both take to the even neighbour."""
    cases = [(300, 451, (256, 384)), (451, 300, (384, 256)), (375, 500, (256, 341)), (1, 2**20, (256, 2**28))]
    for h, w, size in cases:
        recipe = Compose([Resize(256)])
        assert (recipe.window(h, w, Draws(0, 0, 0)).height, recipe.window(h, w, Draws(0, 0, 0)).width) == size
        got = recipe.windows([h], [w], 0, 0, [0])
        assert (int(got.height[0]), int(got.width[0])) == size
    recipe = Compose([CenterCrop(2)])
    for side, top in [(3, 0), (5, 2), (7, 2), (9, 4), (4, 1)]:  # margins 0.5, 1.5, 2.5, 3.5, 1 -> 0, 2, 2, 4, 1
        assert recipe.window(side, side, Draws(0, 0, 0)).box[:2] == (top, top)
        assert tuple(recipe.windows([side], [side], 0, 0, [0]).boxes[0, :2]) == (top, top)


def test_offsets_of_the_last_representable_uniform_stay_in_range():
    """floor(u * m) < m for u = 1 - 2**-53 and any m below 2**53: randrange never returns m."""
    below_one = 1.0 - 2.0**-53
    row = [0.0] * 20 + [below_one, below_one]  # top and left from the largest uniform
    for side in (1, 2, 3, 1000, 65535, 2**26 + 1, 2**31 - 1):
        op = RandomResizedCrop(10, scale=(1 / side**2, 1 / side**2), ratio=(1.0, 1.0))  # a 1x1 crop
        assert op.params(side, side, row) == (side - 1, side - 1, 1, 1)
        offsets, extents = op.params_many(np.array([[side], [side]]), np.array([row]))
        assert offsets[:, 0].tolist() == [side - 1, side - 1] and extents[:, 0].tolist() == [1, 1]
        assert math.floor(below_one * side) == side - 1


def test_per_sample_windows_when_an_op_has_no_array_form():
    class Shift(GeometricOp):
        """A user op: moves the box by a random whole pixel (scalar only)."""
        columns = 1

        def apply(self, view: View, draws) -> View:
            dx = float(int(draws[0] * 3))
            x0, y0, x1, y1 = view.box
            return View((x0 + dx, y0, x1 + dx, y1), view.height, view.width)

    class ScalarOverride(CenterCrop):  # overrides apply only: its parent's apply_many would be wrong
        def apply(self, view: View, draws) -> View:
            return View(view.box, 1, 1)

    class Both(ScalarOverride):
        def apply_many(self, views: Views, draws: np.ndarray) -> Views:
            return Views(views.boxes, np.ones((2, 1), np.int64))

    assert not Shift().vectorized
    assert not ScalarOverride(5).vectorized and Both(5).vectorized and CenterCrop(5).vectorized
    for recipe in (Compose([Resize(50), Shift(), RandomResizedCrop(20), RandomHorizontalFlip()]),
                   Compose([ScalarOverride(5), RandomHorizontalFlip()])):
        assert not recipe.vectorized
        heights, widths, gids = np.arange(1, 301), np.arange(300, 0, -1), np.arange(300) * 7
        _assert_same(recipe.windows(heights, widths, 2, 3, gids), _scalar(recipe, heights, widths, 2, 3, gids))
    both = Compose([Both(5)])
    assert both.vectorized and both.windows([9], [9], 0, 0, [0])[0] == both.window(9, 9, Draws(0, 0, 0))


def test_columns_are_laid_out_per_op():
    recipe = Compose([Resize(300), RandomResizedCrop(224), CenterCrop(200), RandomResizedCrop(100),
                      RandomHorizontalFlip(), Resize((50, 60))])
    assert recipe.columns == 45 and recipe.firsts == [0, 0, 22, 22, 44] and recipe.flip_column == 44
    assert (imagenet_train().columns, imagenet_train().flip_column) == (23, 22)
    assert (imagenet_eval().columns, imagenet_eval().flip_column, imagenet_eval().random) == (0, None, False)
    # the second crop reads columns 22..43 of the sample's draws
    draws = Draws(1, 2, 3)
    view = RandomResizedCrop(224).apply(View.of_image(300, 400), draws)
    second = RandomResizedCrop(100).apply(CenterCrop(200).apply(view, draws), draws.shifted(22))
    window = recipe.window(300, 400, draws)
    assert window.box == Resize((50, 60)).apply(second, draws).box and window.flip == (draws[44] < 0.5)


def test_windows_are_pure_functions_of_seed_epoch_and_id():
    """The same (seed, epoch, id) gets the same window whatever the chunk around it, its
    position, the order of calls or the thread; another seed, epoch or id another one."""
    recipe = imagenet_train(128)
    rng = np.random.default_rng(3)
    heights, widths = rng.integers(100, 900, 512), rng.integers(100, 900, 512)
    gids = rng.permutation(10_000)[:512]
    whole = recipe.windows(heights, widths, 11, 2, gids)
    order = rng.permutation(512)
    shuffled = recipe.windows(heights[order], widths[order], 11, 2, gids[order])
    _assert_same(shuffled, Windows(whole.boxes[order], whole.height[order], whole.width[order], whole.flips[order]))
    for i in (0, 100, 511):
        alone = recipe.windows(heights[i:i + 1], widths[i:i + 1], 11, 2, gids[i:i + 1])[0]
        assert alone == whole[i] == recipe.window(int(heights[i]), int(widths[i]), Draws(11, 2, int(gids[i])))
    later = [recipe.window(int(heights[i]), int(widths[i]), Draws(11, 2, int(gids[i]))) for i in range(511, -1, -1)]
    assert later[::-1] == [whole[i] for i in range(512)]
    other_epoch = recipe.windows(heights, widths, 11, 3, gids)
    other_seed = recipe.windows(heights, widths, 12, 2, gids)
    assert (other_epoch.boxes != whole.boxes).any(axis=1).mean() > 0.95
    assert (other_seed.boxes != whole.boxes).any(axis=1).mean() > 0.95


def test_window_refuses_a_random_random():
    with pytest.raises(TypeError, match="Draws\\(seed, epoch, sample id\\)"):
        imagenet_train().window(100, 100, random.Random(0))


def test_windows_refuse_bad_sizes_and_lengths():
    recipe = imagenet_train()
    with pytest.raises(ValueError, match=">= 1"):
        recipe.windows([10, 0], [10, 10], 0, 0, [1, 2])
    with pytest.raises(ValueError, match="one length"):
        recipe.windows([10, 10], [10], 0, 0, [1, 2])
    with pytest.raises(ValueError, match="3 sample ids for 2"):
        recipe.windows([10, 10], [10, 10], 0, 0, [1, 2, 3])
    empty = recipe.windows(np.zeros(0, np.int64), np.zeros(0, np.int64), 0, 0, np.zeros(0, np.int64))
    assert len(empty) == 0 and empty.boxes.shape == (0, 4)


# --- RandomResizedCrop: torchvision's semantics and distribution -------------------------

def _crops(op: RandomResizedCrop, height: int, width: int, n: int, seed: int = 0):
    """(offsets, extents, found) of n draws on one image size, through the array form."""
    draws = uniforms(seed, 0, np.arange(n), op.columns)
    sizes = np.array([[width], [height]])
    offsets, extents = op.params_many(sizes, draws)
    return offsets, extents, draws


def test_random_resized_crop_distribution_over_100k_draws():
    """Area fraction uniform in scale and log-ratio uniform in log(ratio) (up to the
    rounding to whole pixels) for the draws that fit; every crop inside the image."""
    op = RandomResizedCrop(224, scale=(0.08, 1.0))
    for height, width, fallback in [(3000, 4000, (0, 0, 4000, 3000)), (400, 2000, (0, 733, 533, 400)),
                                    (2000, 400, (733, 0, 400, 533))]:
        offsets, extents, _ = _crops(op, height, width, 100_000)
        (left, top), (w, h) = offsets, extents
        assert (left >= 0).all() and (top >= 0).all() and (left + w <= width).all() and (top + h <= height).all()
        fell_back = (top == fallback[0]) & (left == fallback[1]) & (w == fallback[2]) & (h == fallback[3])
        w, h = w[~fell_back], h[~fell_back]
        # sizes are roundings of sqrt(area * ratio), sqrt(area / ratio): half a pixel either way
        assert ((w + 0.5) * (h + 0.5) >= 0.08 * height * width).all()
        assert ((w - 0.5) * (h - 0.5) <= 1.0 * height * width).all()
        assert ((w + 0.5) / (h - 0.5) >= 3 / 4).all() and ((w - 0.5) / (h + 0.5) <= 4 / 3).all()
        assert fell_back.mean() < (0.01 if width == 4000 else 0.5)
    op = RandomResizedCrop(224, scale=(0.1, 0.3))  # on a big square image no draw is rejected
    offsets, extents, _ = _crops(op, 5000, 5000, 100_000)
    area = extents[0] * extents[1] / 25e6
    assert abs(area.mean() - 0.2) < 0.002 and area.min() > 0.0999 and area.max() < 0.3001
    for q in (0.1, 0.5, 0.9):
        assert abs(np.quantile(area, q) - (0.1 + 0.2 * q)) < 0.003
    log_ratio = np.log(extents[0] / extents[1])
    assert abs(log_ratio.mean()) < 0.003 and abs(log_ratio.std() - 2 * math.log(4 / 3) / math.sqrt(12)) < 0.003
    for axis in (0, 1):  # offsets uniform over the slack: mean of offset / slack is 1/2
        assert abs((offsets[axis] / (5000 - extents[axis])).mean() - 0.5) < 0.005


def test_offsets_take_every_value_of_randrange_equally_often():
    """A 50x50 crop of a 100x100 image: top and left take each of 0..50 (51 values, the
    last one included), each about 1/51 of the time."""
    op = RandomResizedCrop(50, scale=(0.25, 0.25), ratio=(1.0, 1.0))
    offsets, extents, _ = _crops(op, 100, 100, 102_000)
    assert (extents == 50).all()
    for axis in (0, 1):
        counts = np.bincount(offsets[axis].astype(np.int64), minlength=51)
        assert len(counts) == 51 and abs(counts / 102_000 - 1 / 51).max() < 0.0025


@pytest.mark.parametrize("height,width,expected", [
    (10, 1000, (0, 493, 10, 13)),     # wide: the height kept, w = round(10 * 4/3) = 13, centred
    (1000, 10, (493, 0, 13, 10)),     # tall: h = round(10 / (3/4)) = 13
    (1, 1000, (0, 499, 1, 1)),        # 1 x N: h = 1, w = round(4/3) = 1
    (1000, 1, (499, 0, 1, 1)),
    (1, 1, (0, 0, 1, 1)),             # whatever the draw: the one pixel
])
def test_fallback_is_torchvisions_centred_clamped_crop(height, width, expected):
    """No attempt fits (or, 1x1, every fit is the whole pixel): the centred crop with the
    ratio clamped into range, the same in both forms."""
    op = RandomResizedCrop(8)
    top, left, h, w = expected
    for gid in range(200):
        assert op.params(height, width, Draws(0, 0, gid)) == (top, left, h, w)
    offsets, extents, _ = _crops(op, height, width, 200)
    assert (offsets[1] == top).all() and (offsets[0] == left).all()
    assert (extents[1] == h).all() and (extents[0] == w).all()


def test_scale_above_one_falls_back_more_often_and_still_fits():
    op = RandomResizedCrop(64, scale=(1.5, 3.0))
    offsets, extents, _ = _crops(op, 300, 400, 20_000)
    assert (extents[0] <= 400).all() and (extents[1] <= 300).all()
    # every attempt is larger than the image: the fallback, here the whole image (4:3 is in range)
    assert (extents[0] == 400).all() and (extents[1] == 300).all() and (offsets == 0).all()


def test_first_fitting_attempt_is_taken_as_torchvision_does():
    """Attempt 0 too large, attempt 1 fits: attempt 1's size; no later attempt looked at."""
    op = RandomResizedCrop(8, scale=(0.5, 4.0), ratio=(1.0, 1.0))
    row = [1.0 - 2.0**-53, 0.0] + [0.99] * 8 + [0.0] * 10 + [0.5, 0.5]  # areas 4x, 0.5x, then 3.96x
    top, left, h, w = op.params(100, 100, row)
    assert (h, w) == (71, 71) and (top, left) == (15, 15)  # sqrt(5000) = 70.7; floor(0.5 * 30)
    offsets, extents = op.params_many(np.array([[100], [100]]), np.array([row]))
    assert extents[:, 0].tolist() == [71, 71] and offsets[:, 0].tolist() == [15, 15]


def test_flip_rate_is_p_over_100k_draws():
    gids = np.arange(100_000)
    sizes = np.full(100_000, 64)
    for p in (0.5, 0.2, 0.9):
        rate = Compose([RandomHorizontalFlip(p)]).windows(sizes, sizes, 4, 0, gids).flips.mean()
        assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / 100_000)
    for p, want in ((0.0, 0.0), (1.0, 1.0)):
        assert Compose([RandomHorizontalFlip(p)]).windows(sizes, sizes, 4, 0, gids).flips.mean() == want
    two = Compose([RandomHorizontalFlip(0.5), RandomHorizontalFlip(0.2)])  # odd number of flips: 0.5
    assert abs(two.windows(sizes, sizes, 4, 0, gids).flips.mean() - 0.5) < 0.007
    # the flip does not move the crop: same boxes with and without it
    train, crop = imagenet_train(64), Compose([RandomResizedCrop(64)])
    assert np.array_equal(train.windows(sizes[:500], sizes[:500], 4, 0, gids[:500]).boxes,
                          crop.windows(sizes[:500], sizes[:500], 4, 0, gids[:500]).boxes)


def test_windows_rows_are_windows():
    got = imagenet_train(32).windows([40, 50], [60, 70], 1, 1, [5, 6])
    assert len(got) == 2 and isinstance(got[1], Window) and got[1] == imagenet_train(32).window(50, 70, Draws(1, 1, 6))
    assert all(isinstance(v, float) for v in got[0].box) and type(got[0].height) is int and type(got[0].flip) is bool


def test_a_draws_repr_names_its_key_and_first_column():
    """What a log line or a failing assertion shows of a sample's draws: its 64-bit key
    in hex and the column it starts at (``shifted``)."""
    d = Draws(0, 1, 5)
    assert repr(d) == f"Draws(key={d.key:#018x}, first=0)" and len(f"{d.key:#018x}") == 18
    assert repr(d.shifted(3)) == f"Draws(key={d.key:#018x}, first=3)"
    assert repr(Draws(0, 1, 6)) != repr(d)
