"""Distributed semantics in one process: strided split, equal steps, elastic resume."""

from __future__ import annotations

from collections import Counter

import pytest

import turbofeed
from turbofeed import transforms as T

KW = dict(num_workers=2, shuffle=True, seed=4, transform=T.imagenet_eval(16), return_keys=True)


def keys_of(loader, batches: int | None = None) -> list[list[str]]:
    out = []
    for i, (_, _, keys) in enumerate(loader):
        out.append(keys)
        if batches is not None and i + 1 == batches:
            break
    return out


@pytest.mark.parametrize("world_size, batch_size, drop_last", [(2, 8, False), (3, 7, False), (3, 7, True),
                                                                (4, 16, True), (5, 9, False)])
def test_equal_steps_and_disjoint_cover(shards, world_size, batch_size, drop_last):
    ranks = [keys_of(turbofeed.DataLoader(shards, batch_size=batch_size, drop_last=drop_last, rank=r,
                                          world_size=world_size, **KW)) for r in range(world_size)]
    steps = {len(batches) for batches in ranks}
    assert len(steps) == 1  # every rank takes the same number of steps: DDP never hangs
    seen = Counter(k for batches in ranks for keys in batches for k in keys)
    if drop_last:
        assert max(seen.values()) == 1  # nothing twice; the uneven tail is dropped
        assert len(seen) == (120 // world_size) // batch_size * batch_size * world_size
    else:
        assert len(seen) == 120  # everything; the few wrapped-around samples twice
        assert sum(seen.values()) - 120 == -120 % world_size


def test_every_rank_reshuffles_identically(shards):
    def global_order(epoch):
        per_rank = []
        for r in range(2):
            loader = turbofeed.DataLoader(shards, batch_size=10, rank=r, world_size=2, **KW)
            loader.set_epoch(epoch)
            per_rank.append([k for keys in keys_of(loader) for k in keys])
        return [k for pair in zip(*per_rank) for k in pair]  # strided: r0, r1, r0, r1, ...

    e0, e1 = global_order(0), global_order(1)
    assert e0 != e1 and sorted(e0) == sorted(e1)
    assert global_order(1) == e1
    single = turbofeed.DataLoader(shards, batch_size=10, **KW)
    single.set_epoch(1)
    assert [k for keys in keys_of(single) for k in keys] == e1  # same global order at any world size


def test_elastic_resume_from_two_ranks_to_one(shards):
    head = []
    states = []
    for r in range(2):
        loader = turbofeed.DataLoader(shards, batch_size=8, rank=r, world_size=2, **KW)
        loader.set_epoch(3)
        head += [k for keys in keys_of(loader, batches=3) for k in keys]
        states.append(loader.state_dict())
    assert states[0]["samples_done"] == states[1]["samples_done"] == 48
    single = turbofeed.DataLoader(shards, batch_size=8, **KW)
    single.load_state_dict(states[0])
    single.set_epoch(3)
    tail = [k for keys in keys_of(single) for k in keys]
    assert len(tail) == 72
    assert Counter(head + tail) == Counter({k: 1 for k in head + tail}) and len(head + tail) == 120


def test_rank_outside_world_is_refused(shards):
    with pytest.raises(ValueError, match="rank 2 is not in"):
        turbofeed.DataLoader(shards, rank=2, world_size=2)


@pytest.mark.parametrize("env, expected", [
    ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, (1, 4, 1, "torchrun")),
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3"}, (3, 8, 3, "slurm")),
    ({"HOROVOD_RANK": "2", "HOROVOD_SIZE": "3"}, (2, 3, 0, "horovod")),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
     (5, 6, 1, "openmpi")),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, (0, 2, 0, "pmi")),
    ({}, (0, 1, 0, "single")),
])
def test_environment_detection(monkeypatch, env, expected):
    from turbofeed.torch import detect
    from turbofeed.base.ranks import _ENV_SCHEMES

    for _, *names in _ENV_SCHEMES:
        for name in names:
            monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got = detect()
    assert (got.rank, got.world_size, got.local_rank, got.source) == expected
    assert detect(rank=0, world_size=1).source == "arguments"  # explicit arguments win
