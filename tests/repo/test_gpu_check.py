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

ROOT = Path(__file__).resolve().parents[2]
ROWS = ("probe", "nvjpeg", "loader", "hybrid", "cpu", "resnet", "memory", "gds", "switch")


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
    assert log.index("=== [tests]") < log.index("=== [data]") < log.index("=== [bench]")  # the GPU tests first
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
    assert {g["goal"] for g in report["goals"]} and len(report["goals"]) == 6
    gpu_rows = [*report["results"]["loader"].values(), report["results"]["hybrid"],
                report["results"]["resnet"]["turbofeed"], report["results"]["memory"]]
    for row in gpu_rows:  # each says which decoder ran, and nothing fell back
        assert row["decoder"] == "CPU stand-in (turbofeed.testing.CpuStandInDecoder)", row
        assert row["valid"] is True and row["gpu_fallback"] == 0 and row["decoder_failures"] == {}, row
    assert report["invalid"] == {}
    cpu = report["results"]["cpu"]
    for row in [*report["results"]["loader"].values(), report["results"]["hybrid"], *cpu.values()]:
        first = row["epoch1"]  # the first epoch apart: timed whole after its first batch
        assert first["images"] > 0 and first["images"] % 8 == 0 and first["images_per_s"] > 0, row
        assert row["images"] > 0 and row["images_per_s"] > 0, row
    switch = report["results"]["switch"]  # last, in a child process (the row checks the pid)
    assert list(report["results"])[-1] == "switch" and switch["switches"] == 20
    assert log.index("gpu_check.py: gds (") < log.index("gpu_check.py: switch (")
    assert cpu["1"]["shards"] < cpu["2"]["shards"]  # data in proportion to the threads
    assert cpu["1"]["epoch1"]["images"] < cpu["2"]["epoch1"]["images"]
    block = (tmp_path / "out" / "gpu_block.md").read_text().strip().splitlines()
    assert block[0] == "<!-- gpu:begin -->" and block[-1] == "<!-- gpu:end -->"
    assert "DRY RUN" in "\n".join(block)
    assert "| row | images/s | epoch 1 images/s | note |" in block


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


# --- the GPU rows say which decoder ran; one that fell back is invalid ------------------

def _bench(name: str):
    """bench/NAME.py as a module (bench/ is not a package: its scripts import each other)."""
    import importlib

    folder = str(ROOT / "bench")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


class _Refuses:
    """A CPU stand-in GPU decoder that refuses every third image and records one failed
    call, as a GpuDecoder whose nvJPEG failed on them would."""

    description = "refusing stand-in"

    def __init__(self) -> None:
        from turbofeed.decode.gpu import DecoderFailures
        from turbofeed.testing import CpuStandInDecoder

        self.inner, self.failures, self.seen = CpuStandInDecoder(), DecoderFailures(), 0
        self.device = self.inner.device

    def decode(self, datas):
        out = self.inner.decode(datas)
        for i in range(len(out)):
            self.seen += 1
            if self.seen % 3 == 0:
                out[i] = None
        self.failures.record(RuntimeError("nvjpeg stand-in failure"))
        return out


def test_a_gpu_row_that_fell_back_is_invalid_in_the_json_and_the_block(shards):
    import turbofeed
    from turbofeed import transforms as T
    from turbofeed.testing import CpuStandInDecoder

    check, report_module = _bench("gpu_check"), _bench("gpu_report")
    kw = dict(batch_size=20, num_workers=2, transform=T.imagenet_eval(32))
    rows = {}
    for name, decoder in (("good", CpuStandInDecoder()), ("refusing", _Refuses())):
        loader = turbofeed.DataLoader(shards, gpu_decode=decoder, **kw)
        assert sum(len(x) for x, _ in loader) == 120
        rows[name] = check.gpu_record(loader)
    assert rows["good"] == {"decoder": CpuStandInDecoder.description, "gpu_fallback": 0, "decoder_failures": {},
                            "valid": True}
    bad = rows["refusing"]
    assert bad["valid"] is False and bad["gpu_fallback"] == 40 and bad["decoder"] == "refusing stand-in"
    assert bad["decoder_failures"] == {"RuntimeError: nvjpeg stand-in failure": 6}
    assert "40 fell back to the CPU" in bad["invalid"] and "6 decoder calls failed" in bad["invalid"]
    with pytest.warns(RuntimeWarning, match="decoding on the CPU"):  # no GPU here: the CPU path
        cpu_loader = turbofeed.DataLoader(shards, gpu_decode=True, **kw)
    assert check.gpu_record(cpu_loader)["invalid"].startswith("no GPU decoder: the CPU path ran")

    report = {"date": "today", "dry_run": True, "batch": 20, "size": 32, "seconds": 1.0, "images": 120,
              "env": {"device": "CPU", "torch": "x", "cuda": "none", "cpus": 2},
              "results": {"nvjpeg": {"images_per_s": 1000.0, "backend": "raw"},
                          "loader": {"train-uint8": {"images_per_s": 950.0, "of_ceiling": 0.95, **bad},
                                     "eval-uint8": {"images_per_s": 900.0, "of_ceiling": 0.9, **rows["good"]}}}}
    block = report_module.block(report)
    line = next(l for l in block.splitlines() if l.startswith("| gpu-loader train-uint8"))
    assert "**INVALID** (40 fell back to the CPU" in line and "0.95 of ceiling" in line
    assert "INVALID" not in next(l for l in block.splitlines() if l.startswith("| gpu-loader eval-uint8"))
    met = {g: (m, ok) for g, m, ok in report_module.goals(report["results"])}
    assert met["GPU loader >= 0.9 of raw batched nvJPEG"] == ("0.95 invalid", False)  # 0.95, but a CPU figure
    assert met["every GPU row valid: the GPU decoder ran, no fallback, no failed call"] == (
        "1 of 2 valid (invalid: gpu-loader train-uint8)", False)


# --- the window's edges: wheels that do not fit, env commands that hang -------------------

def _installable(folder: Path, name: str, tag: str) -> Path:
    """A wheel pip installs (a package ``name`` with ``X = 1``, and a RECORD)."""
    dist = f"{name}-1.0"
    path = folder / f"{dist}-{tag}.whl"
    files = {f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n",
             f"{name}/__init__.py": "X = 1\n"}
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for f, text in files.items():
            zf.writestr(f, text)
    return path


def _fit(*args: str) -> list[list[str]]:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "wheel_fit.py"), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.split("\t") for line in done.stdout.splitlines()]


def test_wheel_fit_judges_each_wheel_by_its_tags_and_the_glibc():
    """The turbofeed wheel (abi3, manylinux_2_34: its extension needs glibc 2.34) on
    CPython 3.12 with an older and a newer glibc, beside wheels that fit either way and
    one for another Python."""
    names = ["turbofeed-0.1.0-cp311-abi3-manylinux_2_34_x86_64.whl",
             "simplejpeg-1.9.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
             "braceexpand-0.1.7-py2.py3-none-any.whl", "other-1.0-cp313-cp313-manylinux_2_28_x86_64.whl"]
    old = _fit("--python", "3.12", "--glibc", "2.31", *names)
    assert old == [["refused", names[0], "needs glibc >= 2.34, this machine has 2.31"],
                   ["fits", names[1]], ["fits", names[2]],
                   ["refused", names[3], "none of its tags (cp313-cp313-manylinux_2_28_x86_64) installs here"]]
    new = _fit("--python", "3.12", "--glibc", "2.39", *names)
    assert [v[0] for v in new] == ["fits", "fits", "fits", "refused"]


def test_the_install_takes_what_fits_and_each_env_command_has_a_timeout(tmp_path):
    """One pip call for every wheel installed none when pip refused one (gpu-review W2);
    doctor and gds-status had no timeout (W3). Here a wheel for a glibc no machine has
    is refused and named while the other installs, and an env timeout of 0.01 s cuts
    each env command, which the log says, while the tests still run."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _installable(wheels, "fits_here", "py3-none-any")
    _installable(wheels, "too_new", "py3-none-manylinux_2_99_x86_64")
    done = _check(tmp_path, "--wheels", str(wheels), "--only", "tests", GPU_CHECK_INSTALL="1",
                  GPU_CHECK_ENV_TIMEOUT="0.01",
                  GPU_CHECK_TESTS="tests/repo/test_tiers.py::test_no_entry_is_listed_twice_in_one_tier")
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert done.returncode == 1, log[-3000:]
    assert "glibc: " in log and "refused: too_new-1.0-py3-none-manylinux_2_99_x86_64.whl: needs glibc >= 2.99" in log
    assert "1 of 2 wheels fit" in log
    site = tmp_path / "work" / "site"
    assert (site / "fits_here" / "__init__.py").exists() and not (site / "too_new").exists()
    for what in ("the module probe", "turbofeed doctor", "turbofeed gds-status"):
        assert f"{what}: timed out after 0.01s" in log, what
    summary = log.split("=== summary", 1)[1].splitlines()
    assert any(line.startswith("install") and "FAILED" in line for line in summary), summary
    assert any(line.startswith("env") and "FAILED" in line for line in summary), summary
    assert any(line.startswith("tests") and " ok " in line for line in summary), summary
