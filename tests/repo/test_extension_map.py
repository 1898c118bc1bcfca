"""docs/engine.md, "What a change touches": the map of where a data format, a store, an
image format and a sampling plan go (issue 38, item 4). Every module of ``engine/`` and
``io/`` is named there (under a change, or among those none touches), and every file it
names exists, so the map cannot fall behind the code silently."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "turbofeed"
DOC = ROOT / "docs" / "engine.md"
SECTION = "## What a change touches"
KINDS = ("A data format", "A store", "An image format", "A sampling plan")


def section() -> str:
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:] if end < 0 else text[start:end]


def named(text: str) -> set[str]:
    """The package-relative paths the text names in backticks (``engine/run.py``,
    ``decode/csrc/``); a ``<placeholder>`` path is a file to add, not one that exists."""
    return {m for m in re.findall(r"`([a-z_]+/[\w/.]*?(?:\.pyi?|/))(?:::\w+)?`", text) if "<" not in m}


def modules() -> set[str]:
    """Every module of ``engine/`` and ``io/``, package ``__init__`` files left out."""
    return {p.relative_to(PACKAGE).as_posix() for folder in ("engine", "io")
            for p in (PACKAGE / folder).rglob("*.py") if p.name != "__init__.py"}


def test_every_module_of_engine_and_io_is_in_the_map():
    missing = sorted(modules() - named(section()))
    assert not missing, ("docs/engine.md, 'What a change touches', names no place for these modules: say "
                         "which change touches each, or list it under 'Touched by none of these':\n"
                         + "\n".join(missing))


def test_every_path_the_map_names_exists():
    gone = sorted(path for path in named(section())
                  if not any((base / path).exists() for base in (PACKAGE, PACKAGE.parent, ROOT)))
    assert not gone, "docs/engine.md, 'What a change touches', names paths that do not exist:\n" + "\n".join(gone)


def test_the_map_has_each_kind_of_change():
    text = section()
    assert all(f"**{kind}" in text for kind in KINDS), KINDS


def test_a_module_left_out_is_reported():
    text = section().replace("`engine/timeline.py`", "a timeline")
    assert "engine/timeline.py" in modules() - named(text)
