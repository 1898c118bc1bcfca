"""engine.work: SampleWork's crop windows come from the sample's counter-based draws, the
same per sample (window) and per chunk (windows), whichever thread asks."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from turbofeed import transforms as T
from turbofeed.engine.stats import Stats
from turbofeed.engine.work import SampleWork


def _work(transform, seed=5, epoch=2) -> SampleWork:
    return SampleWork(None, transform, Stats(), seed=seed, epoch=epoch)  # windows never read the dataset


def test_windows_of_a_chunk_are_the_per_sample_windows_in_any_thread():
    transform = T.imagenet_train(96)
    work = _work(transform)
    rng = np.random.default_rng(0)
    gids = rng.permutation(100_000)[:256]
    heights, widths = rng.integers(1, 2000, 256), rng.integers(1, 2000, 256)
    chunk = work.windows(gids, heights, widths)
    per_sample = [work.window(int(g), int(h), int(w), transform) for g, h, w in zip(gids, heights, widths)]
    assert [chunk[i] for i in range(256)] == per_sample
    assert work.draws(int(gids[3]))[7] == T.Draws(5, 2, int(gids[3]))[7]
    with ThreadPoolExecutor(4) as pool:  # chunks of 16 in threads, last first: the same rows
        parts = list(pool.map(lambda i: work.windows(gids[i:i + 16], heights[i:i + 16], widths[i:i + 16]),
                              range(240, -1, -16)))
    assert [w for part in parts[::-1] for w in (part[j] for j in range(16))] == per_sample
    other = _work(transform, epoch=3).windows(gids, heights, widths)
    big = (heights >= 200) & (widths >= 200)  # (tiny images have few crops to choose from)
    assert (other.boxes != chunk.boxes).any(axis=1)[big].mean() > 0.95
    assert np.array_equal(work.windows(gids, heights, widths, T.imagenet_eval(64)).boxes,
                          T.imagenet_eval(64).windows(heights, widths, 0, 0, gids).boxes)


def test_windows_need_a_transform():
    with pytest.raises(ValueError, match="no transform"):
        _work(None).windows(np.arange(2), np.ones(2, np.int64), np.ones(2, np.int64))
