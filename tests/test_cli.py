"""The `turbofeed` command as a user runs it: a real subprocess per command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def turbofeed(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "turbofeed.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("cli") / "ds")
    done = turbofeed("make-dataset", out, "--count", "24", "--per-shard", "10", "--classes", "3")
    assert done.returncode == 0, done.stderr
    assert "wrote 3 shards" in done.stdout
    return out


def test_make_dataset_writes_complete_shards(made):
    assert sorted(os.listdir(made)) == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]


def test_inspect_reports_counts_classes_and_sizes(made):
    done = turbofeed("inspect", made, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["samples"] == 24 and report["sources"] == 3
    assert 1 <= report["classes"] <= 3 and report["formats"] == {"jpeg": 24}
    assert 200 <= min(report["height_median"], report["width_median"]) <= 600  # ImageNet-like
    assert 40 < report["kib_mean"] < 200


def test_bench_streams_and_prints_throughput(made):
    done = turbofeed("bench", made, "--epochs", "1", "--warmup", "0", "--batch-size", "8", "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert "24 samples, 3 batches of 8" in done.stdout
    rate = float(done.stdout.split("median ")[1].split(" images/s")[0])
    assert rate > 0
    assert "decode.cpu" in done.stdout  # the stage profile


def test_bench_eval_and_float_pipelines(made):
    for pipeline in ("eval", "train-float"):
        done = turbofeed("bench", made, "--epochs", "1", "--warmup", "0", "--pipeline", pipeline)
        assert done.returncode == 0 and "images/s" in done.stdout, done.stderr


def test_make_dataset_converts_an_image_folder(tmp_path):
    folder = str(tmp_path / "folder")
    assert turbofeed("make-dataset", folder, "--count", "12", "--classes", "3", "--layout", "folder").returncode == 0
    shards = str(tmp_path / "shards")
    done = turbofeed("make-dataset", shards, "--from-folder", folder, "--per-shard", "5")
    assert done.returncode == 0, done.stderr
    report = json.loads(turbofeed("inspect", shards, "--json").stdout)
    folder_report = json.loads(turbofeed("inspect", folder, "--json").stdout)
    assert report["samples"] == folder_report["samples"] == 12
    assert report["classes"] == folder_report["classes"]


def test_errors_are_one_line_with_exit_code_2(tmp_path):
    done = turbofeed("inspect", str(tmp_path / "missing.tar"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"turbofeed: error: no such file or directory: {tmp_path / 'missing.tar'}"
