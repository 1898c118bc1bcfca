"""``turbofeed gds-status`` as a user runs it: what is available, why, and where each
config value came from; on a machine without CUDA it says so and exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from turbofeed.cli import main
from turbofeed.gds import format_status, probe


def _cuda() -> bool:
    from turbofeed.torch.device import gpu_available

    return gpu_available()


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TURBOFEED_GDS_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "turbofeed.cli", "gds-status", *args], capture_output=True,
                          text=True, timeout=120, env=full)


def test_command_reports_hardware_and_config(tmp_path):
    pytest.importorskip("yaml")
    cfg = tmp_path / "gds.yaml"
    cfg.write_text("gds:\n  buffer_pool_size: 64M\n  queue_depth: 4\n")
    done = _run("--config", str(cfg), TURBOFEED_GDS_QUEUE_DEPTH="6")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for label in ("CUDA", "P2P", "KvikIO", "cuFile library", "nvidia-fs driver", "KvikIO compat",
                  "local files", "S3 objects"):
        assert any(line.startswith(label) for line in out.splitlines()), label
    if not _cuda():
        assert "no CUDA" in out and "GPU buffers unavailable" in out
    else:
        assert "cuda:0" in out
    assert f"config (file: {cfg}" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "64 MiB" in lines["buffer_pool_size"] and f"file {cfg}" in lines["buffer_pool_size"]
    assert "6" in lines["queue_depth"] and "env TURBOFEED_GDS_QUEUE_DEPTH" in lines["queue_depth"]
    assert "16 MiB" in lines["max_transfer_size"] and lines["max_transfer_size"].rstrip().endswith("default")
    assert "all visible" in lines["device_ids"]


def test_json_and_reasons(capsys, monkeypatch):
    monkeypatch.setenv("TURBOFEED_GDS_ENABLED", "false")
    assert main(["gds-status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["enabled"] is False and report["config_sources"]["enabled"] == "env TURBOFEED_GDS_ENABLED"
    assert report["cuda_why"] and report["kvikio_why"] and report["file_path"] and report["object_path"]
    if not report["kvikio"]:
        assert "not importable" in report["kvikio_why"] and "turbofeed[gds]" in report["kvikio_why"]
        assert report["compat_why"] == "n/a: KvikIO is not installed"
    if not report["cuda"]:
        assert report["cuda_why"].startswith("no CUDA") and report["devices"] == [] and report["p2p"] == []
        assert report["p2p_why"] == "n/a: no CUDA"


def test_invalid_config_is_reported_not_crashed(capsys, monkeypatch):
    monkeypatch.setenv("TURBOFEED_GDS_QUEUE_DEPTH", "zero")
    assert main(["gds-status"]) == 1
    out = capsys.readouterr().out
    assert "INVALID: gds config: queue_depth: must be an integer >= 1, got 'zero' (env TURBOFEED_GDS_QUEUE_DEPTH)" in out
    assert "CUDA" in out  # the hardware part is still there


def test_probe_is_a_plain_function():
    status = probe(env={})
    text = format_status(status)
    assert text.splitlines()[0].startswith("CUDA")
    assert status.as_dict()["config_sources"]["queue_depth"] == "default"


def _shared_library(path, tmp_path) -> None:
    """A real (empty) shared library at ``path``, built with the C compiler."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a shared library")
    source = tmp_path / "empty.c"
    source.write_text("int turbofeed_test_symbol(void) { return 1; }\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(path), str(source)], check=True, timeout=120)


def _path(src: str, site: object) -> str:
    """The child's PYTHONPATH: this checkout and the stand-in package first, then whatever
    the parent had (where turbofeed's own dependencies may be: the GPU check installs
    them into a folder on PYTHONPATH, and a child without it cannot import turbofeed)."""
    return os.pathsep.join([src, str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


@pytest.mark.parametrize("layout", ["cu13", "cufile"])
def test_libcufile_of_the_cuda_13_wheel_is_found(tmp_path, layout):
    """CUDA 13's nvidia-cufile wheel puts it in nvidia/cu13/lib, CUDA 12's in nvidia/cufile/lib.
    Checked in a child process whose only `nvidia` package is the one built here."""
    lib = tmp_path / "site" / "nvidia" / layout / "lib" / "libcufile.so.0"
    _shared_library(lib, tmp_path)
    code = "from turbofeed.gds.status import _find_libcufile; print(_find_libcufile())"
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
    env = {**os.environ, "PYTHONPATH": _path(src, tmp_path / "site"), "LD_LIBRARY_PATH": ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    found = done.stdout.strip()
    if found != str(lib) and found != "None" and "nvidia" not in found:
        pytest.skip(f"this machine has a system libcufile ({found}): it is found first")
    assert found == str(lib)


def test_compat_mode_is_read_from_kvikio_26s_defaults_submodule(tmp_path):
    """KvikIO 26.x: `import kvikio` does not import `kvikio.defaults`, so an attribute read
    finds nothing. KvikIO itself needs CUDA's libraries, which cannot be loaded on a
    machine without them, so a package with KvikIO 26.10's layout stands in for it here
    (the real one runs in the GPU check: tests/gds/test_cuda.py, `turbofeed gds-status`)."""
    package = tmp_path / "site" / "kvikio"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "26.10.0"\n')  # no `from . import defaults`
    (package / "defaults.py").write_text(
        "import enum\n"
        "class CompatMode(enum.Enum):\n    OFF = 0\n    ON = 1\n    AUTO = 2\n"
        "def get(name):\n    assert name == 'compat_mode'\n    return CompatMode.AUTO\n"
        "def is_compat_mode_preferred():\n    return True\n")
    code = "import json; from turbofeed.gds import probe; print(json.dumps(probe().__dict__, default=str))"
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
    env = {**os.environ, "PYTHONPATH": _path(src, tmp_path / "site")}
    env.pop("KVIKIO_COMPAT_MODE", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["kvikio"] is True and report["kvikio_version"] == "26.10.0"
    assert report["compat_mode"] == "AUTO" and report["compat_effective"] is True, report
    assert "could not ask" not in report["compat_why"]
