"""Packaging: LICENSE, project metadata, an sdist that holds (and can collect) every test,
and a README that stands alone (no link outside the repository)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# sha256 of the Apache License 2.0 as apache.org publishes it (LICENSE-2.0.txt; Debian's
# /usr/share/common-licenses/Apache-2.0 is the same bytes).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _git_files() -> set[str] | None:
    """What git would commit here (tracked + untracked, not ignored); None outside a checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    done = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return None
    return {line for line in done.stdout.splitlines() if (ROOT / line).is_file()}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> dict:
    """Build the sdist of this tree (no isolation: offline, with this venv's setuptools),
    unpack it; ``{"root": unpacked tree, "files": its relative paths, "pkg_info": headers}``."""
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("sdist")
    done = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out), str(ROOT)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (archive,) = out.glob("turbofeed-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.10.12+, 3.11.4+
        tar.extractall(out / "unpacked", **safe)
    (top,) = {name.split("/", 1)[0] for name in names}
    root = out / "unpacked" / top
    files = {name.split("/", 1)[1] for name in names}
    pkg_info = Parser().parsestr((root / "PKG-INFO").read_text())
    return {"root": root, "files": files, "pkg_info": pkg_info}


def test_license_is_the_unmodified_apache_2_text():
    data = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(data).hexdigest() == APACHE_2_SHA256


def test_metadata_has_spdx_license_classifiers_and_keywords(sdist):
    info = sdist["pkg_info"]
    assert info["License-Expression"] == "Apache-2.0"
    assert info.get_all("License-File") == ["LICENSE"]
    assert info["License"] is None  # the deprecated free-text field is gone
    classifiers = set(info.get_all("Classifier") or [])
    for version in PYTHONS:
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert {"Operating System :: POSIX :: Linux", "Typing :: Typed",
            "Topic :: Scientific/Engineering :: Artificial Intelligence"} <= classifiers
    assert any(c.startswith("Intended Audience :: ") for c in classifiers)
    # PEP 639: with License-Expression, license classifiers are not allowed
    assert not any(c.startswith("License :: ") for c in classifiers)
    assert (ROOT / "src" / "turbofeed" / "py.typed").is_file()
    assert "pytorch" in info["Keywords"].split(",")


def test_sdist_holds_every_file_of_the_repository(sdist):
    files = sdist["files"]
    for required in ("LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in",
                     "src/turbofeed/decode/csrc/module.c", "src/turbofeed/py.typed", "tests/conftest.py",
                     "tests/builders.py", "docs/design.md", "scripts/wheel.sh"):
        assert required in files, required
    repo = _git_files()
    if repo is None:
        pytest.skip("not a git checkout: no file list to compare with")
    missing = sorted(path for path in repo - files if path != ".gitignore")
    assert not missing, f"in the repository but not in the sdist: {missing}"
    tests = {path for path in repo if path.startswith("tests/")}
    assert len(tests) > 40 and tests <= files


def test_sdist_has_no_build_outputs_or_caches(sdist):
    repo = _git_files()
    junk = re.compile(r"(\.so|\.pyc|\.o|\.whl)$|(^|/)(__pycache__|\.pytest_cache|\.venvs?|\.data|build|dist)/")
    assert not sorted(p for p in sdist["files"] if junk.search(p))
    if repo is not None:
        generated = {"PKG-INFO", "setup.cfg"}
        extra = sorted(p for p in sdist["files"] - repo
                       if p not in generated and not p.startswith("src/turbofeed.egg-info/"))
        assert not extra, f"in the sdist but not in the repository: {extra}"


def test_the_sdists_tests_collect(sdist):
    """pytest collects the unpacked sdist's own test tree (conftest, builders, every module),
    importing turbofeed from the sdist's src/ (the extension is not built there: collection
    does not need it)."""
    root = sdist["root"]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=root, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    collected_files = {line.split("::", 1)[0] for line in ids}
    assert "tests/repo/test_packaging.py" in collected_files
    assert len(collected_files) > 30 and len(ids) > 300


USER_FACING = ("README.md", "docs", "src", "examples")
TEXT_SUFFIXES = {".md", ".py", ".pyi", ".c", ".h", ".yaml", ".sbatch"}


def test_no_link_outside_the_repository():
    """README, docs, the package and the examples never point outside the repository (the
    bench scripts may use the team's data generator in ../shared: developer tooling)."""
    offenders = []
    for top in USER_FACING:
        path = ROOT / top
        for file in [path] if path.is_file() else sorted(path.rglob("*")):
            generated = ".egg-info" in file.as_posix() or "__pycache__" in file.parts
            if generated or not file.is_file() or file.suffix not in TEXT_SUFFIXES:
                continue
            text = file.read_text(errors="replace")
            if "../shared" in text or "/work/shared" in text:
                offenders.append(str(file.relative_to(ROOT)))
    assert not offenders


def test_readme_paths_exist_in_the_repository():
    text = (ROOT / "README.md").read_text()
    assert "docs/design.md" in text
    for path in sorted(set(re.findall(r"`((?:docs|bench|examples|scripts)/[\w./-]+\.(?:md|py|sh|yaml|sbatch))`", text))):
        assert (ROOT / path).is_file(), path
    for path in re.findall(r"\]\(([^)#:]+)\)", text):  # markdown links: relative, inside the tree
        assert (ROOT / path).resolve().is_relative_to(ROOT) and (ROOT / path).exists(), path


def test_design_brief_is_mirrored_in_docs():
    text = (ROOT / "docs" / "design.md").read_text()
    assert "design brief" in text.splitlines()[0].lower()
    assert "## First contact" in text
