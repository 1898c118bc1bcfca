"""A resume state saved by an earlier version: refused when its crops differ, and its
plan still continues exactly.

The state below was saved by turbofeed at b188853 (before the one-engine redesign) with
the loader options of ``options()`` over three shards named ``shard-0.tar`` ..
``shard-2.tar`` of 20 samples each, after 5 batches of epoch 2. Its version is 1: crops
then came from ``random.Random``, now from a counter-based generator, so it is refused
with a message saying why. The plan fingerprint depends on shard names and sample counts
only, so the same state as version 2 (what this version saves) must be accepted (with a
warning: it has no data fingerprint to check), and the rest of the epoch must be what an
uninterrupted run of this version yields after its fifth batch.
"""

from __future__ import annotations

import pytest

import turbofeed
from builders import small_jpeg, write_tar
from turbofeed import transforms as T

SAVED_BY_B188853 = {"version": 1, "epoch": 2, "samples_done": 20, "batches_done": 5, "seed": 3,
                    "world_size": 1, "plan": "72601f18c98473fe"}


def options() -> dict:
    return dict(batch_size=4, num_workers=2, shuffle=True, seed=3, transform=T.imagenet_train(32), return_keys=True)


def _shards(tmp_path) -> str:
    for s in range(3):
        members = []
        for i in range(20):
            members += [(f"s{s}_{i:03d}.jpg", small_jpeg(seed=s * 100 + i)),
                        (f"s{s}_{i:03d}.cls", str(i % 7).encode())]
        write_tar(str(tmp_path / f"shard-{s}.tar"), members)
    return str(tmp_path)


def test_a_version_1_state_is_refused_as_its_crops_differ(tmp_path):
    loader = turbofeed.DataLoader(_shards(tmp_path), **options())
    with pytest.warns(UserWarning, match="resume state has no data fingerprint"), \
            pytest.raises(ValueError, match="'version' is 1.*counter-based generator.*start epoch 2 again"):
        loader.load_state_dict(dict(SAVED_BY_B188853))


def test_the_plan_of_a_state_saved_before_the_redesign_resumes_exactly(tmp_path):
    path = _shards(tmp_path)
    full = turbofeed.DataLoader(path, **options())
    full.set_epoch(2)
    expected = [(labels.tolist(), keys) for _, labels, keys in full][5:]

    loader = turbofeed.DataLoader(path, **options())
    with pytest.warns(UserWarning, match="resume state has no data fingerprint"):
        loader.load_state_dict({**SAVED_BY_B188853, "version": 2})
    got = [(labels.tolist(), keys) for _, labels, keys in loader]
    assert len(got) == 10 and got == expected
    assert loader.state_dict()["epoch"] == 3  # the resumed epoch was delivered whole
