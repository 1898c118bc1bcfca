"""The examples run as users run them (CPU, tiny settings)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_parses_its_arguments(example):
    """``--help`` of every example: its imports and argument parser work as shipped."""
    if example == "pytorch_lightning_example.py":
        pytest.importorskip("lightning")
    done = subprocess.run([sys.executable, str(EXAMPLES / example), "--help"], capture_output=True, text=True,
                          timeout=120, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage:") and re.search(r"--(data-path|train) ", done.stdout), done.stdout


def _sbatch_args(tmp_path: Path, **env: str) -> list[str]:
    """The arguments examples/slurm_ddp.sbatch hands to ``srun``, the script run by bash.
    ``srun`` and ``scontrol`` are stand-ins (SLURM cannot run here): scontrol names one
    host, srun writes its arguments, one a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho node001\n")
    (bin_dir / "srun").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {shlex.quote(str(tmp_path / "srun.args"))}\n')
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    slurm = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node001", "SLURM_CPUS_PER_TASK": "12",
             "SLURM_JOB_NAME": "turbofeed-ddp", "HOME": str(tmp_path), **env}
    done = subprocess.run(["bash", str(EXAMPLES / "slurm_ddp.sbatch")], capture_output=True, text=True,
                          timeout=60, env=slurm, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return (tmp_path / "srun.args").read_text().splitlines()


def test_slurm_script_passes_its_default_brace_pattern_intact(tmp_path):
    """Inside ``${DATA:-...}`` the pattern's first ``}`` would end the expansion (#27);
    turbofeed, not bash, expands it: 1282 shards."""
    from turbofeed.io import expand_braces

    args = _sbatch_args(tmp_path)
    data = args[args.index("--data-path") + 1]
    assert data == "/shared/imagenet/train/shard-{000000..001281}.tar"
    shards = expand_braces(data)
    assert len(shards) == 1282 and shards[-1] == "/shared/imagenet/train/shard-001281.tar"
    assert args[args.index("--workers") + 1] == "12"
    # DATA from the environment wins, braces and all
    args = _sbatch_args(tmp_path, DATA="/scratch/x-{0..3}.tar")
    assert args[args.index("--data-path") + 1] == "/scratch/x-{0..3}.tar"
