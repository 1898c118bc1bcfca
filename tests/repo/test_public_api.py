"""First contact (DESIGN.md): every public name shows in ``dir(turbofeed)`` and
``help(turbofeed)``; ``import turbofeed`` never imports torch; without torch, the torch
names fail with an error that says what to install."""

from __future__ import annotations

import os
import pydoc
import subprocess
import sys
import textwrap

import pytest

import turbofeed

LAZY = ("DataLoader", "MultiGpuTransfer")


def run_python(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter (nothing imported yet); returns its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_dir_lists_every_public_name_including_the_lazy_ones():
    names = set(dir(turbofeed))
    assert set(LAZY) <= names
    assert set(turbofeed.__all__) <= names
    assert "MissingExtra" in turbofeed.__all__


def test_help_documents_the_lazy_classes():
    text = pydoc.render_doc(turbofeed, renderer=pydoc.plaintext)
    assert "class DataLoader" in text and "class MultiGpuTransfer" in text
    assert "state_dict" in text  # the real class's documentation, not a placeholder's


def test_import_and_dir_do_not_import_torch():
    out = run_python("""
        import sys
        import turbofeed
        assert "DataLoader" in dir(turbofeed)
        print("torch" in sys.modules)
    """)
    assert out.split() == ["False"]


NO_TORCH = """
    import sys
    sys.modules["torch"] = None  # what an environment without torch looks like to Python
"""

USE_LAZY_NAMES = """
    import pydoc
    import turbofeed
    from turbofeed import *  # noqa: F403: still works without torch
    for name in ("DataLoader", "MultiGpuTransfer"):
        assert name not in dir(turbofeed) and name not in turbofeed.__all__, name
        try:
            getattr(turbofeed, name)
        except turbofeed.MissingExtra as exc:
            assert isinstance(exc, ImportError)
            print(exc)
    try:
        from turbofeed import DataLoader  # the message survives the from-import
    except ImportError as exc:
        print(exc)
    text = pydoc.render_doc(turbofeed, renderer=pydoc.plaintext)
    assert "turbofeed[torch]" in text and "class Pipeline" in text
    assert turbofeed.Pipeline and turbofeed.gpu_available() is False
"""


def test_without_torch_the_torch_names_say_what_to_install():
    """Stand-in for an environment without torch: ``sys.modules["torch"] = None`` makes
    ``import torch`` raise ModuleNotFoundError and ``importlib.util.find_spec("torch")``
    return None, as when torch is not installed (the test venv has torch)."""
    out = run_python(NO_TORCH + USE_LAZY_NAMES).splitlines()
    assert len(out) == 3, out
    assert out[0].startswith("turbofeed.DataLoader needs PyTorch")
    assert out[1].startswith("turbofeed.MultiGpuTransfer needs PyTorch")
    assert out[2] == out[0]
    assert all("pip install 'turbofeed[torch]'" in line for line in out)


def test_a_torch_that_fails_to_import_also_names_the_extra(tmp_path):
    """Stand-in: a ``torch`` package on PYTHONPATH whose import raises, as a torch that is
    missing or broken (the test venv has a working torch)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    out = run_python("""
        import turbofeed
        try:
            turbofeed.DataLoader
        except turbofeed.MissingExtra as exc:
            print(exc)
    """, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    assert out.startswith("turbofeed.DataLoader needs PyTorch")
    assert "pip install 'turbofeed[torch]'" in out and "No module named 'torch'" in out


def test_missing_extra_is_public_and_shared_with_io():
    from turbofeed.errors import MissingExtra
    from turbofeed.io import MissingExtra as io_missing

    assert io_missing is MissingExtra is turbofeed.MissingExtra
    assert issubclass(MissingExtra, ImportError) and issubclass(MissingExtra, turbofeed.TurbofeedError)


@pytest.mark.parametrize("name", LAZY)
def test_the_lazy_names_are_the_real_classes(name):
    from turbofeed.torch.loader import DataLoader
    from turbofeed.torch.multi_gpu import MultiGpuTransfer

    assert getattr(turbofeed, name) is {"DataLoader": DataLoader, "MultiGpuTransfer": MultiGpuTransfer}[name]
