"""engine.policy: a bad sample is decoded, counted and logged once per pass, wherever it
sits in the rank's order (twice, as a streamed epoch's padding repeats it), and a slot
is counted as replaced once however often it is refilled (the GPU decoder refusing a
replacement). The plans are the real ones; ``fill`` is the per-sample stage's contract
(load sample ``id`` or raise :class:`SampleError`), written out here so each decode
attempt can be counted."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

from turbofeed.engine.policy import ErrorPolicy, PassPolicy
from turbofeed.engine.stats import Stats
from turbofeed.engine.stream import fill_position
from turbofeed.errors import DatasetError, SampleError
from turbofeed.plan import EpochPlan, make_epoch_plan
from turbofeed.plan.streaming import StreamLayout

HANG_S = 20  # a pass over a handful of positions takes microseconds; a loop never ends


class Decoder:
    """Fills slots from sample ids, failing the ``bad`` ones; counts every attempt."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad
        self.tries: Counter[int] = Counter()

    def __call__(self, gid: int) -> None:
        self.tries[gid] += 1
        if gid in self.bad:
            raise SampleError("s.tar", f"k{gid}", "decode.cpu", "not a JPEG")


def fill_all(plan: EpochPlan, positions, decoder: Decoder, policy: PassPolicy) -> list[int | None]:
    """``fill_position`` for each position, in a thread joined with a timeout: a policy that
    loops for ever fails the test instead of hanging the suite."""
    out: list[int | None] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            out.extend(fill_position(plan, p, decoder, policy) for p in positions)
        except BaseException as exc:  # re-raised in the test's thread
            failure.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_S)
    assert not worker.is_alive(), f"filling positions {list(positions)} did not finish in {HANG_S} s"
    if failure:
        raise failure[0]
    return out


def padded_stream_plan() -> EpochPlan:
    """Rank 1 of 4 over one streamed shard of 9 samples: 3 positions each, and the one
    past the end repeats the rank's own last sample (streaming pads with its own; one
    node of 4 ranks)."""
    layout = StreamLayout(starts=np.array([0, 9]), shard_bytes=np.array([900]), canonical_nodes=1,
                          block_bytes=10_000, ranks_per_node=4)
    plan = make_epoch_plan(9, batch_size=3, seed=0, epoch=0, shuffle=True, rank=1, world_size=4, stream=layout)
    order = plan.order.tolist()
    assert len(order) == 3 and order[1] == order[2] and order[0] != order[1]  # the situation
    return plan


@pytest.mark.parametrize("positions", [[0, 1, 2], [2, 1, 0]], ids=["in-order", "reversed"])
def test_a_bad_sample_twice_in_one_ranks_order_is_decoded_and_counted_once(positions):
    """Both slots of the repeated bad sample get the good one; it is tried once, counted
    once, and each slot counts one replacement, whichever of its two positions a worker
    reaches first."""
    plan = padded_stream_plan()
    good, bad = (int(x) for x in plan.order[:2])
    stats = Stats()
    policy = ErrorPolicy("replace", stats).for_pass()
    decoder = Decoder({bad})
    filled = fill_all(plan, positions, decoder, policy)
    assert filled == [good, good, good]
    assert decoder.tries[bad] == 1
    assert stats.errors == {"decode.cpu": 1} and stats.replaced == 2
    assert policy.is_bad(1, bad) and policy.is_bad(2, bad) and not policy.is_bad(0, good)


def test_a_bad_sample_met_again_during_a_replacement_scan_is_jumped_over():
    """order ``b x b y`` with ``b`` and ``x`` bad: replacing slot 0 meets ``x`` (decoded,
    bad), then ``b`` again at position 2 (known bad from position 0: not decoded), then
    ``y``; every later slot that meets them jumps over them without decoding."""
    b, x, y = 7, 8, 9
    plan = EpochPlan(order=np.array([b, x, b, y], dtype=np.int64), batch_size=4, drop_last=False)
    stats = Stats()
    policy = ErrorPolicy("replace", stats).for_pass()
    decoder = Decoder({b, x})
    assert fill_all(plan, range(4), decoder, policy) == [y, y, y, y]
    assert decoder.tries == Counter({b: 1, x: 1, y: 4})
    assert stats.errors == {"decode.cpu": 2} and stats.replaced == 3
    # position 2 was learnt from its sample's id: it now jumps, like the others, to y
    assert policy.next_unknown(plan.order, 0, 8) == 3
    assert policy.next_unknown(plan.order, 4, 8) == 7
    assert policy.next_unknown(plan.order, 4, 7) is None


def test_every_sample_bad_with_repeats_raises_after_one_scan():
    plan = EpochPlan(order=np.array([3, 4, 3, 4, 3], dtype=np.int64), batch_size=5, drop_last=False)
    stats = Stats()
    decoder = Decoder({3, 4})
    with pytest.raises(DatasetError, match="no good sample in this rank's 5 samples"):
        fill_all(plan, [0], decoder, ErrorPolicy("replace", stats).for_pass())
    assert decoder.tries == Counter({3: 1, 4: 1}) and stats.errors == {"decode.cpu": 2}


def test_a_slot_replaced_twice_counts_one_replacement():
    """The GPU path fills a slot again when the decoder refuses its replacement
    (``engine.gpu.decode_job``): one slot, one ``stats.replaced``."""
    plan = EpochPlan(order=np.array([0, 1, 2, 3], dtype=np.int64), batch_size=4, drop_last=False)
    stats = Stats()
    policy = ErrorPolicy("replace", stats).for_pass()
    decoder = Decoder({1})
    assert fill_all(plan, [1], decoder, policy) == [2]
    decoder.bad.add(2)  # the GPU refused sample 2 in slot 1: the CPU path fills slot 1 again
    assert fill_all(plan, [1], decoder, policy) == [3]
    assert stats.replaced == 1 and stats.errors == {"decode.cpu": 2}
    policy.count_replaced(3)  # another slot: counted
    assert stats.replaced == 2


def test_record_counts_a_sample_once_and_remembers_what_it_is_told():
    stats = Stats()
    errors = ErrorPolicy("skip", stats)
    first, other = SampleError("a.tar", "k1", "decode.cpu", "bad"), SampleError("a.tar", "k2", "fetch", "bad")
    assert errors.record(first) is True
    assert errors.record(SampleError("a.tar", "k1", "decode.cpu", "again")) is False
    assert errors.record(other) is True
    assert stats.errors == {"decode.cpu": 1, "fetch": 1}
    one_pass = errors.for_pass()
    # a position alone (id unknown), then an id alone (position unknown)
    assert one_pass.record(first, index=5) is False
    assert one_pass.is_bad(5, 123) and not one_pass.is_bad(6, 123)
    assert one_pass.record(other, gid=40) is False
    assert one_pass.is_bad(9, 40) and not one_pass.is_bad(9, 41)
    assert errors.for_pass().is_bad(5, 40) is False  # a new pass starts knowing nothing bad
    assert stats.errors == {"decode.cpu": 1, "fetch": 1}


def test_next_unknown_compresses_paths_to_at_most_one_lap():
    """After a scan, every visited position jumps straight past the run (at most the
    order's length, so a later wrapped scan stays inside one lap)."""
    order = np.arange(6, dtype=np.int64)
    policy = ErrorPolicy("replace", Stats()).for_pass()
    for i in (1, 2, 3):
        policy.record(SampleError("s", f"k{i}", "decode.cpu", "bad"), index=i, gid=i)
    assert policy.next_unknown(order, 1, 12) == 4
    assert policy.next_unknown(order, 2, 12) == 4
    assert policy.next_unknown(order, 7, 12) == 10   # the run again, one lap later
    assert policy.next_unknown(order, 1, 4) is None  # the run fills the whole range
    for i in (0, 4, 5):
        policy.record(SampleError("s", f"k{i}", "decode.cpu", "bad"), index=i, gid=i)
    assert policy.next_unknown(order, 0, 6) is None
    assert policy.next_unknown(order, 3, 9) is None


@pytest.mark.parametrize("mode", ["skip", "raise"])
def test_skip_and_raise_never_replace(mode):
    plan = EpochPlan(order=np.array([0, 1, 2], dtype=np.int64), batch_size=3, drop_last=False)
    stats = Stats()
    decoder = Decoder({1})
    policy = ErrorPolicy(mode, stats).for_pass()
    if mode == "skip":
        assert fill_all(plan, range(3), decoder, policy) == [0, None, 2]
        assert stats.skipped == 1
    else:
        with pytest.raises(SampleError, match="s.tar/k1"):
            fill_all(plan, [1], decoder, policy)
    assert stats.replaced == 0 and stats.errors == {"decode.cpu": 1}


def test_on_error_must_be_one_of_the_three():
    with pytest.raises(ValueError, match="on_error must be one of"):
        ErrorPolicy("ignore", Stats())


def test_a_rank_without_a_good_sample_raises_naming_the_first_bad_one():
    """DatasetError says which sample failed first (shard, key, reason), so the user can
    look at one file; the bad samples are each tried once."""
    plan = make_epoch_plan(5, batch_size=5, seed=0, epoch=0, shuffle=False)
    tries: dict[int, int] = {}

    def fill(gid: int) -> None:
        tries[gid] = tries.get(gid, 0) + 1
        raise SampleError("s.tar", f"k{gid}", "decode.cpu", "not a JPEG")

    policy = ErrorPolicy("replace", Stats()).for_pass()
    with pytest.raises(DatasetError, match=r"no good sample in this rank's 5 samples of the epoch "
                                           r"\(first: decode.cpu: s.tar/k0: not a JPEG\)"):
        fill_position(plan, 0, fill, policy)
    assert tries == {g: 1 for g in range(5)}
