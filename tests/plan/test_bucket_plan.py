"""plan.buckets, pure: the "aspect" preset, ratio buckets, an image's bucket, the global
order's padding and sizes (issue 37's mutation run of plan/buckets.py)."""

from __future__ import annotations

import numpy as np

from turbofeed.plan import Buckets
from turbofeed.plan.buckets import bucket_order


def test_the_aspect_preset_is_sdxls_nine_sizes_of_about_a_megapixel():
    """SDXL's training sizes: sides multiples of 64, about 1024 x 1024 pixels each, one
    square, each wide size the transpose of a tall one; sorted by aspect ratio."""
    sizes = Buckets.make("aspect").sizes
    assert len(sizes) == 9 and (1024, 1024) in sizes
    assert all(h % 64 == 0 and w % 64 == 0 and abs(h * w / 2**20 - 1) < 0.07 for h, w in sizes)
    assert sorted((w, h) for h, w in sizes) == sorted(sizes)  # tall and wide pair up
    ratios = [w / h for h, w in sizes]
    assert ratios == sorted(ratios) and ratios[0] == 640 / 1536 and ratios[-1] == 1536 / 640


def test_a_side_of_zero_counts_as_square_in_of_and_assign_alike():
    """A size the header reader could not read is 0; an image with either side 0 goes to
    the square bucket (ratio 1), by ``of`` (one image) and ``assign`` (arrays) alike."""
    b = Buckets.make([(32, 32), (24, 48), (48, 24)])
    square = b.sizes.index((32, 32))
    h = np.array([0, 100, 0, 100, 50])
    w = np.array([100, 0, 0, 400, 200])
    assert [b.of(int(y), int(x)) for y, x in zip(h, w)] == [square] * 3 + [b.sizes.index((24, 48))] * 2
    assert b.assign(h, w).tolist() == [b.of(int(y), int(x)) for y, x in zip(h, w)]


def test_unshuffled_buckets_keep_id_order_and_shuffled_ones_mix_inside_each_bucket():
    """shuffle=False: each bucket's ids in order, buckets in turn (the last batch of a bucket
    padded from its start); shuffle=True permutes the samples inside each bucket as well as
    the global batches, so a batch is not a run of neighbouring ids."""
    groups = np.array([1, 0] * 8 + [2] * 6, np.int64)  # bucket 0: odd ids, 1: even, 2: 16..21
    plain = bucket_order(groups, batch_size=2, world_size=2, seed=0, epoch=0, shuffle=False, drop_last=False)
    assert plain.tolist() == [1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 16, 17, 18, 19, 20, 21, 16, 17]
    mixed = bucket_order(groups, batch_size=2, world_size=2, seed=0, epoch=0, shuffle=True, drop_last=False)
    batches = [sorted(b) for b in mixed.reshape(-1, 4).tolist()]
    runs = [b for b in batches if b == list(range(b[0], b[0] + 2 * 4, 2)) or b == list(range(b[0], b[0] + 4))]
    assert len(runs) < len(batches)  # not every batch is neighbouring ids of its bucket
    assert sorted(set(mixed.tolist())) == list(range(22))
