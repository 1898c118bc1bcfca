"""Types as users see them: ``mypy src/turbofeed`` stays clean (default mode, with the
``[tool.mypy]`` settings of pyproject.toml), and a user's type checker sees turbofeed's
own classes through ``py.typed``: ``turbofeed.DataLoader`` is the real class, not
``Any``, although ``import turbofeed`` only imports it (and torch) on first use.

Both runs share one mypy cache (``.mypy_cache``, git-ignored): a cold run spends most of
its time on torch and NumPy, and the second run reuses that work.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (pip install 'turbofeed[test]')")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "turbofeed"
CACHE = ROOT / ".mypy_cache"


def run_mypy(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MYPYPATH"}  # find turbofeed as users do
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(CACHE), "--show-error-codes", "--no-color-output", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_mypy_finds_no_errors_in_turbofeed():
    done = run_mypy(str(PACKAGE), cwd=ROOT)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


USER_CODE = '''
    import turbofeed
    from turbofeed import DataLoader, Pipeline
    from turbofeed.transforms import imagenet_train

    loader = turbofeed.DataLoader("x.tar", batch_size=4, transform=imagenet_train(224))
    reveal_type(loader)                       # loader
    reveal_type(loader.state_dict())          # state
    reveal_type(DataLoader)                   # class
    reveal_type(turbofeed.MultiGpuTransfer)   # multi_gpu
    pipeline = Pipeline("x.tar")
    reveal_type(pipeline)                     # pipeline
    for sample in pipeline:
        reveal_type(sample)                   # sample
    turbofeed.DataLoadr                       # misspelt
'''


@pytest.fixture(scope="module")
def user_check(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """mypy's output on a user's script (in a folder of its own, so turbofeed is found
    installed, through py.typed), and the revealed type per ``# tag``."""
    folder = tmp_path_factory.mktemp("user")
    code = textwrap.dedent(USER_CODE)
    (folder / "train.py").write_text(code)
    done = run_mypy("train.py", cwd=folder)
    out = done.stdout + done.stderr
    if 'module named "turbofeed"' in out:
        pytest.skip("turbofeed is not installed here (pip install -e .): mypy cannot find it")
    tags = {n: line.split("#")[-1].strip() for n, line in enumerate(code.splitlines(), 1) if "#" in line}
    revealed = {}
    for line in out.splitlines():
        m = re.match(r"train\.py:(\d+): note: Revealed type is \"(.*)\"$", line)
        if m:
            revealed[tags[int(m.group(1))]] = m.group(2)
    return out, revealed


def test_users_see_the_lazy_dataloader_as_its_class(user_check):
    out, revealed = user_check
    assert "missing library stubs or py.typed marker" not in out, out
    assert revealed["loader"] == "turbofeed.torch.loader.DataLoader", out
    assert revealed["class"].endswith("-> turbofeed.torch.loader.DataLoader"), out
    assert "turbofeed.torch.multi_gpu.MultiGpuTransfer" in revealed["multi_gpu"], out
    assert re.fullmatch(r"(builtins\.)?dict\[.*\]", revealed["state"]), out


def test_users_see_the_pipeline_and_its_samples(user_check):
    out, revealed = user_check
    assert revealed["pipeline"] == "turbofeed.pipeline.samples.Pipeline", out
    assert revealed["sample"] == "turbofeed.pipeline.samples.Sample", out


def test_a_misspelt_name_is_an_error_not_any(user_check):
    """Module ``__getattr__`` (the lazy import) is hidden from type checkers, or every
    unknown ``turbofeed.X`` would be ``Any``."""
    out, _ = user_check
    assert re.search(r'train\.py:\d+: error: Module has no attribute "DataLoadr"', out), out
    assert len(re.findall(r"train\.py:\d+: error", out)) == 1, out


@pytest.mark.parametrize("init", sorted(PACKAGE.glob("**/__init__.py")), ids=lambda p: p.parent.name)
def test_all_is_a_plain_list_type_checkers_read(init):
    """``__all__ = sorted([...])`` hides every public name from ``mypy --strict`` users
    (no implicit re-exports): keep a literal list, in sorted order. A package without
    ``__all__`` (``engine``, ``io.local``: only a docstring) binds no public name, so none
    is exported by accident."""
    body = ast.parse(init.read_text()).body
    declared = [node for node in body if isinstance(node, ast.Assign)
                and any(getattr(t, "id", "") == "__all__" for t in node.targets)]
    if not declared:
        public = sorted(name for name in _bound_names(body) if not name.startswith("_"))
        assert public == [], f"{init}: binds {public} without __all__: list them in __all__ or make them private"
        return
    assert len(declared) == 1, f"{init}: one __all__"
    assert isinstance(declared[0].value, ast.List), f"{init}: __all__ must be a list literal"
    names = [ast.literal_eval(e) for e in declared[0].value.elts]
    assert names and names == sorted(names), f"{init}: keep __all__ sorted"


def _bound_names(body: list[ast.stmt]) -> list[str]:
    """The names a module's top-level statements bind (imports, assignments, defs)."""
    names: list[str] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names
                      if not (isinstance(node, ast.ImportFrom) and node.module == "__future__")]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return names
