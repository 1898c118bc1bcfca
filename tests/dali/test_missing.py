"""Without DALI: ``import turbofeed.dali`` works, and building a reader raises
:class:`turbofeed.MissingExtra` (an ImportError) naming the pip command. Runs with or
without DALI installed: a child process hides it behind an import hook."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import sys

class HideDali:  # as if nvidia-dali were not installed
    def find_spec(self, name, path=None, target=None):
        if name == "nvidia.dali" or name.startswith("nvidia.dali."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, HideDali())
import turbofeed.dali
for call in (lambda: turbofeed.dali.reader("x"), lambda: turbofeed.dali.GPUDirectReader(bucket="b")):
    try:
        call()
    except ImportError as exc:
        print(type(exc).__name__, exc)
"""


def test_missing_dali_names_the_pip_command():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("MissingExtra turbofeed.dali needs NVIDIA DALI")
        assert "pip install 'turbofeed[dali]'" in line
