"""The examples run as users run them (CPU, tiny settings)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, env=ENV)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_resnet50_example_trains_and_evaluates(shards):
    out = run(str(EXAMPLES / "imagenet_resnet50.py"), "--train", shards, "--val", shards, "--batch-size", "4",
              "--workers", "2", "--epochs", "1", "--image-size", "32", "--max-steps", "2")
    assert re.search(r"epoch 0: loss [\d.]+, \d+ images/s per process, val acc [\d.]+", out)
    assert "decode.cpu" in out  # the loader profile


def test_lightning_ddp_example_splits_the_data(shards, tmp_path):
    pytest.importorskip("lightning")
    done = subprocess.run([sys.executable, str(EXAMPLES / "pytorch_lightning_example.py"), "--data-path", shards,
                           "--batch-size", "16", "--workers", "1", "--image-size", "32", "--devices", "2",
                           "--strategy", "ddp"], capture_output=True, text=True, timeout=300, env=ENV,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # 120 samples over 2 ranks = 60 each = 3 full batches of 16 with drop_last.
    assert sorted(re.findall(r"rank (\d)/2: (\d+) samples", done.stdout)) == [("0", "48"), ("1", "48")]


def test_kubeflow_manifest_is_a_valid_pytorchjob():
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load((EXAMPLES / "kubeflow_pytorchjob.yaml").read_text())
    assert job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    for role in ("Master", "Worker"):
        (container,) = specs[role]["template"]["spec"]["containers"]
        assert container["command"][-1] == "examples/distributed_ddp.py"
        assert "--resume" in container["args"]


def test_slurm_script_passes_bash_syntax_check():
    script = EXAMPLES / "slurm_ddp.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert "srun" in script.read_text() and "examples/distributed_ddp.py" in script.read_text()
