"""plan.stream_rounds: a streamed resampled epoch checks its draw when it is made."""

from __future__ import annotations

import numpy as np
import pytest

from turbofeed.plan import EpochDraw, StreamLayout
from turbofeed.plan.stream_rounds import StreamRounds

SIZES = np.array([10, 0, 14, 10, 6, 10, 10, 12])
STARTS = np.concatenate([[0], np.cumsum(SIZES)]).astype(np.int64)
LAYOUT = StreamLayout(starts=STARTS, shard_bytes=SIZES * 100, canonical_nodes=2, block_bytes=2000)
GROUPS = np.array([0, 0, 0, 0, 1, 1, 1, 1])


@pytest.mark.parametrize("bad, message", [
    (dict(groups=GROUPS, weights=(1.0, -1.0)), "weights must be finite"),
    (dict(groups=GROUPS, weights=(1.0,)), "groups must be in 0..0"),
    (dict(groups=GROUPS[:5], weights=(1.0, 1.0)), "groups must be 8 integers"),
    (dict(shard_sizes=np.array([10, -1])), "shard_sizes must be a 1-D array of integers >= 0"),
])
def test_a_bad_draw_is_refused_when_the_epoch_is_made_not_when_a_round_is_read(bad, message):
    """The loader makes the epoch's StreamRounds when the epoch starts: a bad weight, group
    or size fails there, not rounds later in the middle of the epoch."""
    draw = EpochDraw(**{"shard_sizes": SIZES, "epoch_size": 100, "resample": True, **bad})
    with pytest.raises(ValueError, match=message):
        StreamRounds(draw, LAYOUT, seed=0, epoch=0, shuffle=True)
    good = StreamRounds(EpochDraw(shard_sizes=SIZES, epoch_size=100, resample=True, groups=GROUPS,
                                  weights=(1.0, 3.0)), LAYOUT, seed=0, epoch=0, shuffle=True)
    assert len(np.concatenate([good.round(r)[0] for r in range(good.rounds)])) == 100
