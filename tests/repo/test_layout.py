"""The layout rules of docs/design.md ("Layout", "One engine"), checked on the source tree.

- no import cycle between modules, imports inside functions (lazy ones) included;
- no module over 400 lines (Python or C);
- no private name (``_x``) imported from another package;
- a package's ``__init__`` imports from no other module that imports it back;
- packages depend downwards only: no import at module level from a package of a higher
  rank (``RANKS``, drawn in docs/design.md, "Package ranks").
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "turbofeed"
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module: the Python files, and the compiled extensions by their ``.pyi``
    stubs (``from . import _crop`` imports the extension, it takes no name of the package)."""
    stubs = {module_name(p): p for p in sorted(PACKAGE.rglob("*.pyi")) if not p.with_suffix(".py").exists()}
    return {**stubs, **{module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}}


def resolve(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module ``from <...> import`` names in ``path``."""
    if node.level == 0:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, known: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import in the file, lazy ones
    included (``if TYPE_CHECKING`` blocks are not imports at run time and are left out)."""
    tree = ast.parse(path.read_text())
    checking: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, (ast.Name, ast.Attribute)) and ast.unparse(test).split(".")[-1] == "TYPE_CHECKING":
            for child in node.body:
                for inner in ast.walk(child):
                    checking.add(id(inner))
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names if alias.name.startswith("turbofeed")]
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module_name(path), path, node)
            if not target.startswith("turbofeed"):
                continue
            names = [alias.name for alias in node.names]
            found.append((target, names))
            # ``from . import x`` imports the submodule x
            found += [(f"{target}.{n}", []) for n in names if f"{target}.{n}" in known]
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    for name, path in known.items():
        for target, names in imports(path, known):
            # Importing a.b.c runs a/__init__ and a/b/__init__ first. A module's own
            # parent packages are already importing when it runs, so an edge to one of
            # them counts only when the module takes names defined there.
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix not in known or prefix == name:
                    continue
                if name.startswith(prefix + "."):
                    takes_names = prefix == target and any(f"{target}.{n}" not in known for n in names)
                    if not takes_names:
                        continue
                edges[name].add(prefix)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_lazy_imports_included() -> None:
    found = cycles(graph())
    assert not found, "import cycles (modules that reach each other):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_over_400_lines() -> None:
    sources = sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".c", ".h"))
    long = {str(p.relative_to(SRC)): n for p in sources if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def package_of(module: str) -> str:
    """``turbofeed.io`` for ``turbofeed.io.stores.cache``; ``turbofeed`` for top-level modules."""
    parts = module.split(".")
    if len(parts) > 1 and (PACKAGE / parts[1]).is_dir():
        return ".".join(parts[:2])
    return parts[0]


def test_no_private_name_imported_across_packages() -> None:
    known = modules()
    bad = []
    for name, path in known.items():
        for target, names in imports(path, known):
            other_package = package_of(target) != package_of(name)
            private_module = any(part.startswith("_") for part in target.split(".")[2:])
            if other_package and private_module:
                bad.append(f"{name} imports module {target}")
            for n in names:
                if other_package and n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{name} imports {target}.{n}")
    assert not bad, "private names used across packages:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", ["base", "engine", "io", "decode", "transforms", "plan", "pipeline", "torch", "gds",
                                     "testing"])
def test_layout_packages_exist(package: str) -> None:
    assert (PACKAGE / package / "__init__.py").is_file(), f"docs/design.md names turbofeed/{package}/"


#: The package ranks of docs/design.md ("Package ranks"), lowest first. A module imports
#: at module level only from its own rank or below; imports inside functions (run when
#: called, after every module is loaded) and type-only imports (``if TYPE_CHECKING:``,
#: never run) may point anywhere. Top-level modules are ranked by their own name, the
#: package root (``turbofeed/__init__.py``) as ``__init__``.
RANKS: dict[str, int] = {
    # 0: the bottom: the executor, counters, stage declaration, ranks and threads (base/),
    # the errors, units, optional-dependency helpers and redaction every package uses
    "base": 0, "errors": 0, "units": 0, "_deps": 0, "extras": 0, "redact": 0,
    # 1: pure parts: the order, the decoders (and field specs), the transforms
    "plan": 1, "decode": 1, "transforms": 1,
    # 2: sources, and what a dataset is (checked when made, opens nothing)
    "io": 2, "datasets": 2,
    # 3: the engine
    "engine": 3,
    # 4: the front-ends (Ray Data among them), and the gds client (hands tensors to torch/)
    "torch": 4, "pipeline": 4, "dali": 4, "gds": 4, "ray": 4,
    # 5: test helpers, the command line, the package root
    "testing": 5, "cli": 5, "_cli_args": 5, "__main__": 5, "_convert": 5, "_datagen": 5, "_doctor": 5,
    "_index_cli": 5, "_plot": 5, "_bench_numpy": 5, "__init__": 5,
}


def unit_of(module: str) -> str:
    """What ``RANKS`` ranks: ``io`` for ``turbofeed.io.stores.cache``, ``errors`` for
    ``turbofeed.errors``, ``__init__`` for ``turbofeed`` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def runtime_imports(tree: ast.Module, name: str, is_package: bool, known: Collection[str]) -> list[tuple[int, str]]:
    """(line, module imported) for each import of turbofeed run when module ``name`` is
    imported: not inside a function, not under ``if TYPE_CHECKING:`` (its ``else``
    counts). ``from a import b`` imports module ``a.b`` when there is one, else ``a``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.If) and isinstance(node.test, (ast.Name, ast.Attribute)) and \
                ast.unparse(node.test).split(".")[-1] == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names if alias.name.startswith("turbofeed"))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                target = node.module or ""
            else:
                package = name.split(".") if is_package else name.split(".")[:-1]
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            if target.split(".")[0] == "turbofeed":
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.append((node.lineno, sub if sub in known else target))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return sorted(set(found))


def upward_imports(tree: ast.Module, name: str, is_package: bool, known: Collection[str]) -> list[str]:
    """One line per import of ``name`` at module level from a package ranked above it."""
    own = RANKS[unit_of(name)]
    return [f"{name}:{line} imports {target} ({unit_of(name)}, rank {own} -> {unit_of(target)}, rank "
            f"{RANKS[unit_of(target)]})"
            for line, target in runtime_imports(tree, name, is_package, known)
            if RANKS.get(unit_of(target), -1) > own]


def test_every_package_and_top_level_module_has_a_rank() -> None:
    unranked = sorted({unit_of(m) for m in modules()} - set(RANKS))
    assert not unranked, f"give these a rank in RANKS (and in docs/design.md, 'Package ranks'): {unranked}"


def test_packages_depend_downwards_only() -> None:
    known = modules()
    bad = []
    for name, path in sorted(known.items()):
        if path.suffix == ".py":
            bad += upward_imports(ast.parse(path.read_text()), name, path.name == "__init__.py", known)
    assert not bad, "imports from a package of a higher rank (docs/design.md, 'Package ranks'):\n" + "\n".join(bad)


def test_no_other_front_end_imports_the_torch_package() -> None:
    """Within rank 4, ``pipeline/``, ``dali/`` and ``gds/`` take nothing from ``torch/`` at
    module level: what they shared with it (rank detection, thread choice) is in ``base/``."""
    known = modules()
    bad = [f"{name}:{line} imports {target}"
           for name, path in sorted(known.items())
           if path.suffix == ".py" and RANKS[unit_of(name)] <= RANKS["torch"] and unit_of(name) != "torch"
           for line, target in runtime_imports(ast.parse(path.read_text()), name, path.name == "__init__.py", known)
           if unit_of(target) == "torch"]
    assert not bad, "imports of turbofeed.torch below the package root:\n" + "\n".join(bad)


def test_the_rank_check_finds_an_upward_import() -> None:
    source = """\
from __future__ import annotations
from typing import TYPE_CHECKING
from ..base.executor import Executor
from ..engine.run import Engine
from .. import torch as tf_torch
import turbofeed.pipeline.samples
if TYPE_CHECKING:
    from ..torch.loader import DataLoader
else:
    from ..dali import reader
try:
    from ..gds import client
except ImportError:
    pass
def later():
    from ..torch.loader import DataLoader
class Holder:
    from ..engine import stats
"""
    known = {"turbofeed.base.executor", "turbofeed.engine.run", "turbofeed.torch", "turbofeed.torch.loader",
             "turbofeed.pipeline.samples", "turbofeed.dali.reader", "turbofeed.gds.client",
             "turbofeed.engine.stats"}
    found = upward_imports(ast.parse(source), "turbofeed.io.fake", False, known)
    assert [line.split(" (")[0] for line in found] == [
        "turbofeed.io.fake:4 imports turbofeed.engine.run",
        "turbofeed.io.fake:5 imports turbofeed.torch",
        "turbofeed.io.fake:6 imports turbofeed.pipeline.samples",
        "turbofeed.io.fake:10 imports turbofeed.dali.reader",
        "turbofeed.io.fake:12 imports turbofeed.gds.client",
        "turbofeed.io.fake:18 imports turbofeed.engine.stats",
    ]
    assert found[0].endswith("(io, rank 2 -> engine, rank 3)")
