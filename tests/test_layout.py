"""The layout rules of docs/design.md ("Layout", "One engine"), checked on the source tree.

- no import cycle between modules, imports inside functions (lazy ones) included;
- no module over 400 lines (Python or C);
- no private name (``_x``) imported from another package;
- a package's ``__init__`` imports from no other module that imports it back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
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
    """``turbofeed.io`` for ``turbofeed.io.s3.cache``; ``turbofeed`` for top-level modules."""
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


@pytest.mark.parametrize("package", ["engine", "io", "decode", "transforms", "plan", "pipeline", "torch", "gds",
                                     "testing"])
def test_layout_packages_exist(package: str) -> None:
    assert (PACKAGE / package / "__init__.py").is_file(), f"docs/design.md names turbofeed/{package}/"
