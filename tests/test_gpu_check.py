"""The GPU check (scripts/gpu_check.sh, bench/gpu_check.py) and its wheel folder
(scripts/gpu_wheels.sh) cannot rot between GPU windows: the dry run runs every step on
the CPU here (install, env, data, tests, bench), a failing step is reported while the
next steps still run, and the wheel folder's checks (requirements against the GPU
machine's package list, one version each, the size budget) work on real wheel files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = ("probe", "nvjpeg", "loader", "hybrid", "cpu", "resnet", "memory", "gds")


def _check(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "GPU_CHECK_PYTHON": sys.executable, **env}
    environ.pop("PYTHONPATH", None)  # the script sets it: the checkout's src/ (or the wheels')
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path / "out"),
                           "--work", str(tmp_path / "work"), *args],
                          capture_output=True, text=True, timeout=600, env=environ, cwd=tmp_path)


def test_the_dry_run_runs_every_step_and_writes_the_report(tmp_path):
    done = _check(tmp_path, "--wheels", str(tmp_path / "no-wheels"))
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert done.returncode == 0, log[-6000:]
    for name in ("install", "env", "data", "tests", "bench"):
        assert f"=== [{name}]" in log
        assert any(line.startswith(name) and " ok " in line for line in log.splitlines()), (name, log[-1500:])
    assert '"native_decoder"' in log  # turbofeed doctor --json ran
    assert "passed" in (tmp_path / "out" / "tests.log").read_text()
    report = json.loads((tmp_path / "out" / "gpu_results.json").read_text())
    assert report["dry_run"] is True and report["failed"] == []
    assert set(report["results"]) == set(ROWS)
    for name in ROWS:
        assert "error" not in report["results"][name], (name, report["results"][name])
    assert report["results"]["nvjpeg"]["images_per_s"] > 0
    probe = report["results"]["probe"]  # the CPU stand-in: strict, refuses image by image
    assert probe["truncated_alone"]["outcome"].startswith("raised")
    assert probe["gpudecoder_mixed_batch"]["none"] == ["empty", "garbage", "truncated", "cmyk"]
    assert set(report["results"]["loader"]) == {"train-uint8", "train-float", "eval-uint8", "eval-float"}
    assert len(report["results"]["memory"]["epochs"]) == 3
    assert {g["goal"] for g in report["goals"]} and len(report["goals"]) == 5
    block = (tmp_path / "out" / "gpu_block.md").read_text().strip().splitlines()
    assert block[0] == "<!-- gpu:begin -->" and block[-1] == "<!-- gpu:end -->"
    assert "DRY RUN" in "\n".join(block)


def test_a_failing_step_is_reported_and_the_next_steps_still_run(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    done = _check(tmp_path, "--wheels", str(wheels), "--only", "tests")
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert done.returncode == 1, log[-3000:]
    summary = log.split("=== summary", 1)[1].splitlines()
    assert any(line.startswith("install") and "FAILED" in line for line in summary), summary
    assert any(line.startswith("env") and " ok " in line for line in summary), summary
    assert any(line.startswith("tests") and " ok " in line for line in summary), summary
    assert not any(line.startswith(("data", "bench")) for line in summary)  # --only tests
    assert not (tmp_path / "out" / "gpu_results.json").exists()


def test_bad_arguments_exit_2(tmp_path):
    done = _check(tmp_path, "--only", "everything")
    assert done.returncode == 2 and "usage:" in done.stderr


# --- scripts/gpu_wheels.sh --check: real wheel files made here ---------------------------

def _wheel(folder: Path, name: str, version: str, requires: list[str], tag: str = "py3-none-any",
           padding: int = 0) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-{tag}.whl"
    meta = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}.dist-info/METADATA", "\n".join(meta) + "\n")
        zf.writestr(f"{dist}.dist-info/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
        if padding:
            zf.writestr(f"{name.replace('-', '_')}/blob.bin", os.urandom(padding), compress_type=zipfile.ZIP_STORED)
    return path


def _wheels_check(folder: Path, budget_mib: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_wheels.sh"), "--check", str(folder)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": sys.executable, "GPU_WHEELS_BUDGET_MIB": str(budget_mib)})


def test_wheels_check_accepts_what_the_machine_and_the_folder_cover(tmp_path):
    _wheel(tmp_path, "simplejpeg", "1.9.0", ["numpy>=1.19.3"], "cp312-cp312-manylinux_2_28_x86_64")
    _wheel(tmp_path, "rapids-logger", "0.3.0", [], "py3-none-manylinux_2_28_x86_64")
    _wheel(tmp_path, "libkvikio-cu13", "26.10.0", ["cuda-pathfinder", "rapids-logger==0.3.*",
                                                   'pytest; extra == "test"'], "py3-none-manylinux_2_28_x86_64")
    done = _wheels_check(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "3 wheels" in done.stdout and "every requirement" in done.stdout


def test_wheels_check_names_a_requirement_nobody_brings(tmp_path):
    _wheel(tmp_path, "libkvikio-cu13", "26.10.0", ["cuda-pathfinder", "rapids-logger==0.3.*"],
           "py3-none-manylinux_2_28_x86_64")
    done = _wheels_check(tmp_path)
    assert done.returncode != 0
    assert "rapids-logger (needed by libkvikio_cu13-26.10.0" in done.stderr


def test_wheels_check_refuses_two_versions_and_other_pythons(tmp_path):
    _wheel(tmp_path, "tqdm-extra", "1.0", [])
    _wheel(tmp_path, "tqdm-extra", "2.0", [])
    assert "two versions of tqdm-extra" in _wheels_check(tmp_path).stderr
    other = tmp_path / "other"
    other.mkdir()
    _wheel(other, "simplejpeg", "1.9.0", [], "cp313-cp313-manylinux_2_28_x86_64")
    assert "does not install on CPython 3.12" in _wheels_check(other).stderr


@pytest.mark.parametrize("other_mib, kvikio_mib, fits", [(2, 3, True), (3, 0.2, False)])
def test_wheels_over_budget_drop_kvikio_only_when_that_makes_them_fit(tmp_path, other_mib, kvikio_mib, fits):
    _wheel(tmp_path, "simplejpeg", "1.9.0", [], "cp312-cp312-manylinux_2_28_x86_64", padding=other_mib << 20)
    _wheel(tmp_path, "rapids-logger", "0.3.0", [], "py3-none-manylinux_2_28_x86_64")
    kv = _wheel(tmp_path, "libkvikio-cu13", "26.10.0", ["rapids-logger==0.3.*"], "py3-none-manylinux_2_28_x86_64",
                padding=int(kvikio_mib * 2**20))
    done = _wheels_check(tmp_path, budget_mib=2.5)
    if fits:
        assert done.returncode == 0, done.stderr
        assert "dropping KvikIO" in done.stderr and not kv.exists()
    else:
        assert done.returncode != 0 and "over the 2.5 MiB budget" in done.stderr and kv.exists()
