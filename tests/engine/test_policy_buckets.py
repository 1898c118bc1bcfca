"""engine.policy, the parts the aspect-ratio buckets and the chunked decode use: a bucket
without any good sample is found once per pass (one warning, its slots skipped), and
``any_bad`` / ``known_bad`` answer from what the pass recorded (issue 37's mutation run)."""

from __future__ import annotations

import logging
import threading

import numpy as np

from turbofeed.engine.policy import ErrorPolicy
from turbofeed.engine.stats import Stats
from turbofeed.engine.stream import fill_position
from turbofeed.errors import SampleError
from turbofeed.plan import make_epoch_plan

HANG_S = 20


def test_a_bucket_without_a_good_sample_is_warned_once_per_pass_and_its_slots_skipped(caplog):
    """Bucket 1 (ids 8..11) is all bad: its 4 slots are skipped, each of its samples is
    tried once, one warning names the bucket; bucket 0's slots are filled as they are."""
    groups = np.array([0] * 8 + [1] * 4, np.int64)
    plan = make_epoch_plan(12, batch_size=4, seed=0, epoch=0, shuffle=True, buckets=groups)
    bad = {8, 9, 10, 11}
    tries: dict[int, int] = {}

    def fill(gid: int) -> None:
        tries[gid] = tries.get(gid, 0) + 1
        if gid in bad:
            raise SampleError("s.tar", f"k{gid}", "decode.cpu", "not a JPEG")

    stats = Stats()
    policy = ErrorPolicy("replace", stats).for_pass()
    out: list[int | None] = []
    worker = threading.Thread(target=lambda: out.extend(fill_position(plan, p, fill, policy)
                                                        for p in range(len(plan.order))), daemon=True)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        worker.start()
        worker.join(HANG_S)
    assert not worker.is_alive()
    order = plan.order.tolist()
    assert [g for g, gid in zip(out, order) if gid in bad] == [None] * 4
    assert [g for g, gid in zip(out, order) if gid not in bad] == [gid for gid in order if gid not in bad]
    assert all(tries[gid] == 1 for gid in range(12))
    warned = [r.getMessage() for r in caplog.records if "has no good sample" in r.getMessage()]
    assert len(warned) == 1 and "bucket 1 " in warned[0]
    assert stats.skipped == 4 and stats.errors == {"decode.cpu": 4} and stats.replaced == 0
    assert policy.bucket_is_bad(1) and not policy.bucket_is_bad(0)


def test_any_bad_and_known_bad_answer_from_what_the_pass_recorded():
    """The chunked decode asks ``any_bad`` before it looks up each position: it must turn
    True with the first bad sample recorded, by position or by id alone."""
    for index, gid in ((3, 7), (None, 7), (3, None)):
        policy = ErrorPolicy("replace", Stats()).for_pass()
        assert policy.any_bad() is False
        assert policy.known_bad(np.array([3, 4]), np.array([7, 8])).tolist() == [False, False]
        policy.record(SampleError("s.tar", "k7", "decode.cpu", "truncated"), index, gid)
        assert policy.any_bad() is True
        assert policy.known_bad(np.array([3, 4, 5]), np.array([7, 8, 7])).tolist() == \
            [True, False, gid is not None]
