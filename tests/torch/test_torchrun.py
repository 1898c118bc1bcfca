"""Real multi-process training through examples/distributed_ddp.py under torchrun (Gloo, CPU).

Each run logs the sample keys of every step per rank; the tests compare those logs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from builders import free_port

import turbofeed
from turbofeed import transforms as T
from turbofeed._datagen import make_imagenet_like

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "distributed_ddp.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


@pytest.fixture(scope="module")
def odd_data(tmp_path_factory) -> str:
    """45 images (an odd count) in 3 shards: ranks cannot split it evenly."""
    out = tmp_path_factory.mktemp("odd")
    make_imagenet_like(str(out), count=45, per_shard=15, classes=5, seed=3, progress=False)
    return str(out)


def torchrun(data: str, log: Path, *extra: str, nproc: int = 2, node: tuple[int, int] | None = None,
             port: int | None = None, check: bool = True, background: bool = False):
    launcher = [f"--nproc_per_node={nproc}", f"--master_port={port or free_port()}",
                "--master_addr=127.0.0.1"]
    if node is not None:
        launcher += [f"--nnodes={node[1]}", f"--node_rank={node[0]}"]
    cmd = [*TORCHRUN, *launcher, EXAMPLE, "--data-path", data, "--gpus", "0", "--batch-size", "8",
           "--image-size", "32", "--workers", "1", "--log-keys", str(log), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def read_log(log: Path, rank: int) -> list[dict]:
    path = Path(f"{log}.rank{rank}.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def keys(rows: list[dict], epoch: int) -> list[str]:
    return [k for row in rows if row["epoch"] == epoch for k in row["keys"]]


def test_two_processes_split_each_epoch_and_reshuffle(odd_data, tmp_path):
    log = tmp_path / "keys"
    torchrun(odd_data, log, "--epochs", "2")
    ranks = [read_log(log, r) for r in range(2)]
    for epoch in (0, 1):
        steps = [sum(row["epoch"] == epoch for row in rows) for rows in ranks]
        assert steps == [3, 3]  # 23 samples per rank (one wrapped) -> 8 + 8 + 7
        r0, r1 = keys(ranks[0], epoch), keys(ranks[1], epoch)
        assert len(r0) == len(r1) == 23
        assert len(set(r0) | set(r1)) == 45  # complete
        assert len(set(r0) & set(r1)) == 1  # disjoint but for the one wrap-around pad sample
        # The order is a pure function of (seed, epoch, rank, world size): recompute it here.
        for rank, got in enumerate((r0, r1)):
            local = turbofeed.DataLoader(odd_data, batch_size=8, shuffle=True, seed=0, rank=rank, world_size=2,
                                         transform=T.imagenet_eval(8), return_keys=True)
            local.set_epoch(epoch)
            assert got == [k for _, _, ks in local for k in ks]
    assert keys(ranks[0], 0) != keys(ranks[0], 1)


def test_drop_last_gives_equal_full_steps(odd_data, tmp_path):
    log = tmp_path / "keys"
    torchrun(odd_data, log, "--drop-last")
    ranks = [read_log(log, r) for r in range(2)]
    assert [len(rows) for rows in ranks] == [2, 2]  # 22 per rank -> two full batches of 8
    assert all(len(row["keys"]) == 8 for rows in ranks for row in rows)
    seen = Counter(keys(ranks[0], 0) + keys(ranks[1], 0))
    assert max(seen.values()) == 1 and len(seen) == 32


def test_kill_and_resume_mid_epoch_exactly_and_elastically(odd_data, tmp_path):
    full = tmp_path / "full"
    torchrun(odd_data, full, "--epochs", "2")
    expected = [read_log(full, r) for r in range(2)]

    crashed = tmp_path / "crashed"
    ckpt = tmp_path / "ckpt.pt"
    done = torchrun(odd_data, crashed, "--epochs", "2", "--checkpoint", str(ckpt), "--checkpoint-every", "1",
                    "--crash-after-step", "2", check=False)
    assert done.returncode != 0  # rank 0 was killed by SIGKILL after checkpointing step 2
    before = [[row for row in read_log(crashed, r) if row["step"] <= 2] for r in range(2)]
    assert [len(rows) for rows in before] == [2, 2]
    shutil.copy(ckpt, tmp_path / "ckpt-elastic.pt")

    # Same world size: the concatenation equals the uninterrupted run, batch for batch.
    resumed = tmp_path / "resumed"
    out = torchrun(odd_data, resumed, "--epochs", "2", "--checkpoint", str(ckpt), "--resume")
    assert "resumed at epoch 0" in out.stdout + out.stderr
    for r in range(2):
        assert [row["keys"] for row in before[r] + read_log(resumed, r)] == [row["keys"] for row in expected[r]]

    # Elastic: the rest of epoch 0 on one process, no sample repeated or lost.
    elastic = tmp_path / "elastic"
    torchrun(odd_data, elastic, "--epochs", "1", "--checkpoint", str(tmp_path / "ckpt-elastic.pt"),
             "--resume", nproc=1)
    epoch0 = keys(before[0], 0) + keys(before[1], 0) + keys(read_log(elastic, 0), 0)
    assert Counter(epoch0) == Counter({k: 1 for k in epoch0}) and len(epoch0) == 45


def test_two_nodes_on_localhost(odd_data, tmp_path):
    log = tmp_path / "keys"
    port = free_port()
    nodes = [torchrun(odd_data, log, nproc=1, node=(n, 2), port=port, background=True) for n in range(2)]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in nodes]
    finally:
        for p in nodes:
            p.kill()
    assert [p.returncode for p in nodes] == [0, 0], outputs
    r0, r1 = keys(read_log(log, 0), 0), keys(read_log(log, 1), 0)
    assert len(r0) == len(r1) == 23 and len(set(r0) | set(r1)) == 45
    assert "epoch 0: loss" in outputs[0]
