"""The native windows of a chunk (csrc/windows.c, turbofeed.transforms.program): the
same windows as the pure Python form and the NumPy form, to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from turbofeed import transforms as T
from turbofeed.decode import native
from turbofeed.transforms.buckets import BucketResize
from turbofeed.transforms.draws import Draws, epoch_key
from turbofeed.transforms.program import program

pytestmark = pytest.mark.skipif(not native.available(), reason="the native extension is not built")

RECIPES = [
    T.imagenet_train(224),
    T.imagenet_eval(224),
    T.Compose([T.Resize(100), T.RandomResizedCrop((50, 70), scale=(0.5, 2.0), ratio=(0.2, 5)),
               T.RandomHorizontalFlip(0.3)]),
    T.Compose([T.Resize((40, 60)), T.CenterCrop((70, 30))]),
    T.Compose([T.RandomResizedCrop(32), T.CenterCrop(20), T.Resize(17), T.RandomHorizontalFlip(1.0)]),
    T.Compose([T.RandomResizedCrop(8, scale=(0.9, 1.5), ratio=(4.0, 9.0)), T.Normalize()]),  # many fallbacks
]


def sizes(rng, n):
    h, w = rng.integers(1, 4000, n), rng.integers(1, 4000, n)
    h[:64], w[64:128] = 1, 1  # 1 x N and N x 1
    h[128:192], w[128:192] = 20000, 3  # extreme aspect ratios
    return h, w


@pytest.mark.parametrize("compose", RECIPES, ids=repr)
def test_native_windows_equal_python_and_numpy_to_the_bit(compose):
    rng = np.random.default_rng(1)
    n = 30000
    h, w = sizes(rng, n)
    gids = rng.integers(-2**63, 2**63 - 1, n)
    for seed, epoch in ((0, 0), (7, 3), (-1, 2**70)):
        boxes, heights, widths, flips = native.windows(compose.program, epoch_key(seed, epoch), gids, h, w)
        array = compose.windows(h, w, seed, epoch, gids)
        np.testing.assert_array_equal(boxes, array.boxes)
        np.testing.assert_array_equal(heights, array.height)
        np.testing.assert_array_equal(widths, array.width)
        np.testing.assert_array_equal(flips, array.flips)
        for i in range(0, n, 61):
            one = compose.window(int(h[i]), int(w[i]), Draws(seed, epoch, int(gids[i])))
            assert one.box == tuple(boxes[i]) and (one.height, one.width, one.flip) == (heights[i], widths[i], flips[i])


def test_a_sample_gets_its_window_whatever_its_chunk():
    compose, key = RECIPES[0], epoch_key(3, 1)
    gids = np.arange(100, 164)
    h, w = np.full(64, 375), np.full(64, 500)
    whole = native.windows(compose.program, key, gids, h, w)[0]
    parts = [native.windows(compose.program, key, part[::-1], h[:len(part)], w[:len(part)])[0][::-1]
             for part in (gids[i:i + 7] for i in range(0, 64, 7))]
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_ops_without_a_native_form_have_no_program():
    class MyCrop(T.CenterCrop):  # a subclass may apply() otherwise
        pass

    assert program(T.Compose([BucketResize("aspect")])) is None
    assert program(T.Compose([MyCrop(10)])) is None
    assert program(T.Compose([T.Resize(10)])) is not None


def test_bad_programs_and_sizes_are_refused():
    compose = RECIPES[0]
    one = np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="malformed"):
        native.windows(compose.program[:20], 0, one, np.ones(1), np.ones(1))
    bad = compose.program.copy()
    bad[4] = 9  # no such op
    with pytest.raises(ValueError, match="malformed"):
        native.windows(bad, 0, one, np.ones(1), np.ones(1))
    with pytest.raises(ValueError, match="sizes must be >= 1"):
        native.windows(compose.program, 0, one, np.zeros(1), np.ones(1))


def test_every_random_resized_crop_reads_its_own_tables():
    """Two RandomResizedCrops of different scales and ratios: the second op's tables
    start where the first's end (the program's offsets), and it draws its own numbers."""
    compose = T.Compose([T.RandomResizedCrop(64, scale=(0.3, 0.9), ratio=(0.5, 2.0)),
                         T.RandomResizedCrop((20, 30), scale=(0.05, 0.2), ratio=(1.5, 3.0)),
                         T.RandomResizedCrop(9, scale=(0.6, 1.0), ratio=(0.25, 0.5))])
    prog = compose.program
    rng = np.random.default_rng(2)
    n = 5000
    h, w = sizes(rng, n)
    gids = rng.integers(-2**63, 2**63 - 1, n)
    boxes, heights, widths, flips = native.windows(prog, epoch_key(4, 1), gids, h, w)
    array = compose.windows(h, w, 4, 1, gids)
    np.testing.assert_array_equal(boxes, array.boxes)
    np.testing.assert_array_equal(heights, array.height)
    np.testing.assert_array_equal(widths, array.width)
