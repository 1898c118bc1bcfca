"""`turbofeed doctor`: which fast paths are on here, why not, and the fix for each."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from turbofeed import _doctor
from turbofeed.decode import native

CAPABILITIES = ("native_decoder", "threads", "gpu_decoder", "kvikio", "cufile", "obstore", "boto3", "torch", "cuda")


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _collect_in_subprocess(**env: str) -> dict:
    code = "import json, turbofeed._doctor as d; print(json.dumps(d.collect()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_collect_has_one_entry_per_capability_and_is_json():
    report = _doctor.collect()
    assert json.loads(json.dumps(report)) == report
    assert report["version"] and report["python"]
    for name in CAPABILITIES:
        entry = report[name]
        assert set(entry) == {"on", "why", "fix"}, name
        assert isinstance(entry["on"], bool) and entry["why"], name
        if not entry["on"]:
            assert entry["fix"], f"{name} is off and has no fix"


@pytest.mark.skipif(not native.available(), reason="the native extension is not built here")
def test_native_decoder_on_when_built():
    entry = _doctor.collect()["native_decoder"]
    assert entry["on"] and entry["fix"] is None


def test_native_decoder_off_names_the_variable():
    entry = _collect_in_subprocess(TURBOFEED_NATIVE="0")["native_decoder"]
    assert not entry["on"]
    assert "TURBOFEED_NATIVE=0" in entry["why"]
    assert "TURBOFEED_NATIVE" in entry["fix"]


@pytest.mark.skipif(_cuda(), reason="CUDA is available here")
def test_cuda_and_gpu_decoder_off_without_cuda():
    report = _doctor.collect()
    assert not report["cuda"]["on"] and "CUDA" in report["cuda"]["why"]
    assert not report["gpu_decoder"]["on"] and report["gpu_decoder"]["why"]


def test_render_shows_every_capability():
    report = _doctor.collect()
    text = _doctor.render(report)
    lines = text.splitlines()
    for name in CAPABILITIES:
        line = next(line for line in lines if line.startswith(name + " "))
        assert ("ON" if report[name]["on"] else "off") in line
        assert report[name]["why"] in line
        if not report[name]["on"]:
            assert report[name]["fix"] in line
    assert report["version"] in text


def test_cli_doctor_json():
    done = subprocess.run([sys.executable, "-m", "turbofeed", "doctor", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(CAPABILITIES) <= set(report)


def test_a_failing_probe_names_no_tracker_that_does_not_exist():
    """#27: the fix pointed to an issue tracker the project does not have."""
    from turbofeed._doctor import _guard

    def probe():
        raise OSError("boom")

    entry = _guard("native decoder", probe)
    assert entry["on"] is False and "OSError: boom" in entry["why"]
    assert "tracker yet" in entry["fix"] and "turbofeed doctor --json" in entry["fix"]


def _broken_torchvision(folder) -> str:
    """A torchvision package whose import fails as one built for another torch does."""
    package = folder / "torchvision"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    (package / "io.py").write_text("")
    return os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])


def test_a_torchvision_that_fails_to_import_is_named_with_its_error(tmp_path):
    """Issue 37 #8: the GPU decoder line said "a fault in turbofeed's own check"."""
    report = _collect_in_subprocess(PYTHONPATH=_broken_torchvision(tmp_path))
    entry = report["gpu_decoder"]
    assert not entry["on"] and "own check" not in entry["why"] + (entry["fix"] or "")
    assert "torchvision" in entry["why"] and "operator torchvision::nms does not exist" in entry["why"]
    assert "torchvision" in entry["fix"]
    text = subprocess.run([sys.executable, "-m", "turbofeed", "doctor"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": _broken_torchvision(tmp_path / "again")})
    assert text.returncode == 0 and "operator torchvision::nms does not exist" in text.stdout


def test_find_backend_names_a_backend_that_fails_to_import(tmp_path):
    """With CUDA, the loader's own backend search said nothing of the broken torchvision
    (it raised past its "never raises")."""
    code = ("import torch; torch.cuda.is_available = lambda: True; "
            "from turbofeed.decode.gpu import find_backend; print(find_backend('torchvision'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": _broken_torchvision(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "(None," in done.stdout and "operator torchvision::nms does not exist" in done.stdout


@pytest.mark.parametrize("gpu", [True, False], ids=["nvidia-gpu", "cpu-only"])
def test_without_torch_the_fix_installs_the_build_for_this_machine(monkeypatch, gpu):
    """#38: the fix was `pip install 'turbofeed[torch]'`, which resolves PyPI's multi-GB CUDA
    build on a CPU-only machine too. Now: PyPI's (CUDA) torch where an NVIDIA GPU is, the
    CPU-only build from PyTorch's CPU index elsewhere, as the README and scripts/setup.sh say."""
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.setattr(_doctor, "_nvidia_gpu", lambda: gpu)
    entry, torch = _doctor._torch()
    assert torch is None and not entry["on"] and "not installed" in entry["why"]
    cpu_command = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    if gpu:
        assert entry["fix"].startswith("pip install torch (") and "--index-url" not in entry["fix"]
    else:
        assert entry["fix"].startswith(cpu_command)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(root, "scripts", "setup.sh")) as f:
        setup = f.read()
    assert cpu_command in readme and "CPU_INDEX=https://download.pytorch.org/whl/cpu" in setup


def test_nvidia_gpu_is_found_without_torch(monkeypatch, tmp_path):
    """An ``nvidia-smi`` that lists a GPU says there is one; one that fails, or none, not."""
    monkeypatch.setattr(_doctor, "_NVIDIA_GPUS", str(tmp_path / "no-driver"))
    smi = tmp_path / "nvidia-smi"
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _doctor._nvidia_gpu() is False
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-1)'\n")
    smi.chmod(0o755)
    assert _doctor._nvidia_gpu() is True
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert _doctor._nvidia_gpu() is False
