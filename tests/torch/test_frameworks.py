"""Lightning DDP and Accelerate with 2 CPU processes (Gloo, 127.0.0.1) and no turbofeed
argument about ranks: the default ``enable_distributed=None`` splits the data, even for a
loader built before the process group exists (tests/framework_worker.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import free_port

WORKER = str(Path(__file__).resolve().parents[1] / "framework_worker.py")


def launch(cmd: list[str], tmp_path: Path) -> str:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(var, None)  # the test's own environment says nothing about ranks
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    return done.stderr


def torchrun(*args: str, tmp_path: Path) -> str:
    return launch([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                   "--master_addr=127.0.0.1", f"--master_port={free_port()}", WORKER, *args], tmp_path)


def shares(out: Path) -> list[list[str]]:
    rows = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(2)]
    assert [row["world"] for row in rows] == [2, 2]
    return [row["keys"] for row in rows]


def assert_split(keys: list[list[str]], total: int) -> None:
    r0, r1 = keys
    assert len(r0) == len(r1) == total // 2  # equal shares
    assert not set(r0) & set(r1)  # disjoint
    assert len(set(r0) | set(r1)) == total  # together: the whole dataset


def test_lightning_ddp_splits_a_loader_built_before_fit(shards, tmp_path):
    pytest.importorskip("lightning")
    out = tmp_path / "keys"
    stderr = launch([sys.executable, WORKER, "lightning", shards, str(out)], tmp_path)
    assert_split(shares(out), 120)
    assert "splitting the data across 2 ranks" in stderr  # the one WARNING saying so


def test_accelerate_splits_and_resumes_mid_epoch_exactly(shards, tmp_path):
    pytest.importorskip("accelerate")
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    stderr = torchrun("accelerate", shards, str(whole), "--stop-after", "3", tmp_path=tmp_path)
    full = shares(whole)
    assert_split(full, 120)
    assert "splitting the data across 2 ranks" in stderr
    torchrun("accelerate", shards, str(resumed), "--resume", tmp_path=tmp_path)
    rest = shares(resumed)
    for rank in range(2):  # the checkpoint after 3 steps of 8: the rest of each rank's share
        assert rest[rank] == full[rank][3 * 8:]
