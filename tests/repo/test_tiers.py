"""The tier table (tests/tiers.py) cannot rot: every entry names a folder, a file or a test
that exists, every tier is a registered marker, and scripts/test.sh --fast deselects them all."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

import tiers

ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=None)
def _defined(path: Path) -> set[str]:
    """``name`` and ``Class::name`` of every function and class defined in a test file."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        if isinstance(node, ast.ClassDef):
            found |= {f"{node.name}::{child.name}" for child in node.body
                      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return found


def _missing(entry: str) -> str | None:
    """Why ``entry`` names nothing that exists, or None."""
    file, _, name = entry.partition("::")
    path = ROOT / file
    if not file.startswith("tests/"):
        return "not under tests/"
    if entry.endswith("/"):
        return None if path.is_dir() and any(path.rglob("test_*.py")) else "no such test folder"
    if not (path.is_file() and path.name.startswith("test_") and path.suffix == ".py"):
        return "no such test file"
    if name and name not in _defined(path):
        return f"{file} defines no {name}"
    return None


def test_every_entry_names_a_test_that_exists():
    """A test renamed, moved or removed must leave the table too (one test for the ~300 entries)."""
    missing = [f"{tier}: {entry}: {why}" for tier, entries in tiers.TIERS.items() for entry in entries
               if (why := _missing(entry))]
    assert not missing, "\n".join(missing)


def test_no_entry_is_listed_twice_in_one_tier():
    for tier, entries in tiers.TIERS.items():
        assert len(entries) == len(set(entries)), tier


def test_every_tier_is_a_registered_marker_and_the_fast_tier_leaves_them_all_out():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers = {line.split(":", 1)[0] for line in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(tiers.TIERS) == markers
    assert tiers.FAST_EXPRESSION == " and ".join(f"not {tier}" for tier in tiers.TIERS)
    assert f'FAST="{tiers.FAST_EXPRESSION}"' in (ROOT / "scripts" / "test.sh").read_text()


def test_an_entry_matches_its_folder_file_or_test_and_every_parametrization():
    saved = dict(tiers.TIERS)
    try:
        tiers.TIERS.clear()
        tiers.TIERS.update({"gpu": ("tests/gpu/",), "packaging": ("tests/repo/test_wheel.py",),
                            "subprocess": ("tests/test_cli.py::test_bench",),
                            "slow": ("tests/test_cli.py::TestX::test_y", "tests/test_cli.py::test_bench")})
        assert tiers.tiers_of("tests/gpu/test_x.py", "tests/gpu/test_x.py::test_a[1]") == ["gpu"]
        assert tiers.tiers_of("tests/repo/test_wheel.py", "tests/repo/test_wheel.py::test_a") == ["packaging"]
        assert tiers.tiers_of("tests/test_cli.py", "tests/test_cli.py::test_bench[a-b]") == ["slow", "subprocess"]
        assert tiers.tiers_of("tests/test_cli.py", "tests/test_cli.py::test_bench_other") == []
        assert tiers.tiers_of("tests/test_cli.py", "tests/test_cli.py::TestX::test_y[3]") == ["slow"]
        assert tiers.tiers_of("tests/gpux/test_x.py", "tests/gpux/test_x.py::test_a") == []
    finally:
        tiers.TIERS.clear()
        tiers.TIERS.update(saved)


def test_a_file_is_left_uncollected_only_when_the_expression_deselects_all_its_tests():
    saved = dict(tiers.TIERS)
    try:
        tiers.TIERS.clear()
        tiers.TIERS.update({"slow": ("tests/test_a.py", "tests/test_b.py::test_x"),
                            "subprocess": ("tests/test_a.py::test_y",), "gpu": ("tests/gpu/",), "packaging": ()})
        assert tiers.leaves_out("tests/test_a.py", tiers.FAST_EXPRESSION)
        assert tiers.leaves_out("tests/gpu/", "not gpu") and tiers.leaves_out("tests/gpu/test_z.py", "not gpu")
        assert not tiers.leaves_out("tests/test_b.py", tiers.FAST_EXPRESSION)  # only one test of it is slow
        assert not tiers.leaves_out("tests/test_a.py", "subprocess")  # test_y may be selected
        assert tiers.leaves_out("tests/test_a.py", "gpu")
        assert not tiers.leaves_out("tests/test_a.py", "not gpu")
        assert not tiers.leaves_out("tests/test_a.py", "not slow or parametrize")  # not a tier: unsure
        assert not tiers.leaves_out("tests/test_c.py", tiers.FAST_EXPRESSION)
    finally:
        tiers.TIERS.clear()
        tiers.TIERS.update(saved)


def test_collected_tests_carry_their_tiers_markers():
    """The conftest hook marks what pytest collects: ``-m gpu`` selects the GPU folder's
    tests and ``-m "not gpu"`` none of them (a child pytest that only collects)."""
    folder = "tests/gpu/test_sendable.py"
    counts = {}
    for expression in ("gpu", "not gpu"):
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "-m", expression, folder], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: nothing selected
        counts[expression] = sum("::" in line for line in done.stdout.splitlines())
    assert counts["gpu"] > 0 and counts["not gpu"] == 0
