"""``enable_distributed=None`` (the default): split where a launcher or process group says
there are several ranks, read again when a pass is planned; ``False`` keeps every sample
(with one warning under a launcher). The launchers' variables are set as they set them."""

from __future__ import annotations

import logging

import pytest

import turbofeed
from turbofeed import transforms as T
from turbofeed.base import ranks as env_module

KW = dict(batch_size=8, num_workers=1, transform=T.imagenet_eval(16), return_keys=True)
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                 "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "HOROVOD_RANK", "HOROVOD_SIZE",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE")


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(env_module, "_announced", set())  # each test sees its own first warning


def keys(loader) -> list[str]:
    return [k for _, _, ks in loader for k in ks]


@pytest.mark.parametrize("launcher", [{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"},
                                      {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"},
                                      {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}])
def test_default_splits_under_a_launcher_and_says_so_once(shards, monkeypatch, caplog, launcher):
    for var, value in launcher.items():
        monkeypatch.setenv(var, value)
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        loader = turbofeed.DataLoader(shards, **KW)
        got = keys(loader)
        keys(loader)
    assert (loader.rank, loader.world_size, len(got)) == (1, 2, 60)
    assert got == keys(turbofeed.DataLoader(shards, rank=1, world_size=2, **KW))
    said = [r.getMessage() for r in caplog.records if "splitting" in r.getMessage()]
    assert len(said) == 1 and "2 ranks: this is rank 1" in said[0], said


def test_a_launcher_seen_after_construction_splits_the_next_pass(shards, monkeypatch):
    """Lightning and Accelerate may start the ranks after the loader was built."""
    loader = turbofeed.DataLoader(shards, **KW)
    assert (loader.world_size, len(loader)) == (1, 15)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert len(loader) == 8  # 60 samples of rank 0: 7 batches of 8 and one of 4
    assert len(keys(loader)) == 60 and loader.state_dict()["world_size"] == 2


def test_false_reads_everything_and_warns_under_a_launcher(shards, monkeypatch, caplog):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        loader = turbofeed.DataLoader(shards, enable_distributed=False, **KW)
        assert len(keys(loader)) == 120 and loader.world_size == 1
    said = [r.getMessage() for r in caplog.records if "enable_distributed=False" in r.getMessage()]
    assert len(said) == 1 and "every one of them reads the whole dataset" in said[0]


def test_explicit_rank_wins_and_single_process_stays_whole(shards, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        assert len(keys(turbofeed.DataLoader(shards, **KW))) == 120  # no launcher: everything
    assert not [r for r in caplog.records if "splitting" in r.getMessage()]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    loader = turbofeed.DataLoader(shards, rank=0, world_size=3, **KW)
    assert (loader.rank, loader.world_size, len(keys(loader))) == (0, 3, 40)


def test_pipeline_splits_by_default(shards, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with turbofeed.Pipeline(shards, num_workers=1, decode_jpeg=False) as pipe:
        assert (pipe.rank, pipe.world_size, len(pipe)) == (1, 2, 60)
    with turbofeed.Pipeline(shards, num_workers=1, decode_jpeg=False, enable_distributed=False) as pipe:
        assert len(pipe) == 120


def test_enable_distributed_takes_only_none_true_false(shards):
    with pytest.raises(ValueError, match="enable_distributed must be None"):
        turbofeed.DataLoader(shards, enable_distributed="auto", **KW)


@pytest.mark.parametrize("given, missing", [({"rank": 1}, "world_size"), ({"world_size": 1}, "rank"),
                                            ({"rank": 0}, "world_size")])
def test_rank_or_world_size_alone_is_refused_naming_the_other(shards, monkeypatch, given, missing):
    """Alone, ``rank=1`` read everything as rank 0 of 1, and ``world_size=1`` under
    torchrun read half as rank 1 of 2 (issue 37 #3)."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for make in (lambda: turbofeed.DataLoader(shards, **given, **KW),
                 lambda: turbofeed.Pipeline(shards, num_workers=1, decode_jpeg=False, **given),
                 lambda: turbofeed.DistributedPipeline(shards, num_workers=1, decode_jpeg=False, **given)):
        with pytest.raises(ValueError, match=f"given without {missing}: give both rank and world_size"):
            make()


def test_a_given_pair_the_launcher_contradicts_is_used_with_one_warning(shards, monkeypatch, caplog):
    """An evaluation loader under torchrun that reads everything: rank=0, world_size=1."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        loader = turbofeed.DataLoader(shards, rank=0, world_size=1, **KW)
        assert (loader.rank, loader.world_size, len(keys(loader)), len(keys(loader))) == (0, 1, 120, 120)
        with turbofeed.Pipeline(shards, num_workers=1, decode_jpeg=False, rank=0, world_size=1) as pipe:
            assert len(pipe) == 120
        agreeing = turbofeed.DataLoader(shards, rank=1, world_size=2, **KW)
        assert len(keys(agreeing)) == 60
    said = [r.getMessage() for r in caplog.records if "given, but" in r.getMessage()]
    assert said == ["turbofeed: rank=0, world_size=1 given, but torchrun says rank 1 of 2: using the values "
                    "given (this process reads 1/1 of the data as rank 0)"], said
