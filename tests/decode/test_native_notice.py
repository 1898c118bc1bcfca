"""Without the native decoder nothing stays silent: the loader warns once per process, the
doctor says why, and a source build that cannot compile the extension says so.

The "not built" case is real: a copy of the package without the compiled extension goes
first on PYTHONPATH, so ``turbofeed.decode._crop`` fails to import as on a machine
without the libjpeg headers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from turbofeed._datagen import make_imagenet_like
from turbofeed.decode import native

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTICE = "the native JPEG decoder is off"
_SKIP = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "*.egg-info")

# Two DataLoaders and a Pipeline in one process: one notice in all.
LOADERS = """
import sys, turbofeed
from turbofeed import transforms as T
assert turbofeed.__file__.startswith(sys.argv[1]), turbofeed.__file__
for _ in range(2):
    loader = turbofeed.DataLoader(sys.argv[2], batch_size=4, num_workers=1, transform=T.imagenet_eval(32))
    images, labels = next(iter(loader))
    assert tuple(images.shape) == (4, 3, 32, 32)
    loader.close()
pipe = turbofeed.Pipeline(tar_paths=[sys.argv[2]], num_workers=1, transform=T.imagenet_eval(32))
pipe.start()
assert len(pipe.next_batch(4)) == 4
pipe.stop()
print("ok")
"""


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("notice-shards")
    return make_imagenet_like(str(out), count=8, per_shard=8, progress=False)[0]


@pytest.fixture(scope="module")
def without_extension(tmp_path_factory) -> str:
    """A folder holding a copy of the turbofeed package without its compiled extension."""
    folder = tmp_path_factory.mktemp("no-ext")
    shutil.copytree(os.path.join(ROOT, "src", "turbofeed"), folder / "turbofeed", ignore=_SKIP)
    return str(folder)


def _python(code: str, *args: str, pythonpath: str | None = None, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("TURBOFEED_NATIVE", "PYTHONPATH")}
    if pythonpath:
        environ["PYTHONPATH"] = pythonpath
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env={**environ, **env})
    assert done.returncode == 0, done.stderr
    return done


def test_loader_warns_once_when_the_extension_is_missing(without_extension, shard):
    done = _python(LOADERS, without_extension, shard, pythonpath=without_extension)
    assert done.stdout.strip() == "ok"
    assert done.stderr.count(NOTICE) == 1, done.stderr
    assert "not built" in done.stderr
    assert "2x slower" in done.stderr
    assert "libjpeg62-turbo-dev" in done.stderr
    assert "turbofeed doctor" in done.stderr


def test_doctor_says_why_when_the_extension_is_missing(without_extension):
    code = "import json, turbofeed._doctor as d; print(json.dumps(d.collect()['native_decoder']))"
    entry = json.loads(_python(code, pythonpath=without_extension).stdout)
    assert not entry["on"]
    assert "not built" in entry["why"]
    assert "libjpeg62-turbo-dev" in entry["fix"] and "pip install" in entry["fix"]


def test_turned_off_by_the_user_is_an_info_line_not_a_warning(shard):
    code = "import logging; logging.basicConfig(level=logging.INFO)\n" + LOADERS
    done = _python(code, os.path.join(ROOT, "src"), shard, TURBOFEED_NATIVE="0")
    notices = [line for line in done.stderr.splitlines() if NOTICE in line]
    assert len(notices) == 1, done.stderr
    assert notices[0].startswith("INFO:turbofeed:") and "TURBOFEED_NATIVE=0" in notices[0]


@pytest.mark.skipif(not native.available(), reason="the native extension is not built here")
def test_no_notice_when_the_extension_is_on(shard):
    code = "import logging; logging.basicConfig(level=logging.DEBUG)\n" + LOADERS
    done = _python(code, os.path.join(ROOT, "src"), shard)
    assert NOTICE not in done.stderr


# --- setup.py: a source build that cannot compile the extension says so, visibly ---------

def _build(tmp_path, **env: str) -> subprocess.CompletedProcess:
    """``python setup.py build_ext`` in a copy of the source tree."""
    src = tmp_path / "tree"
    shutil.copytree(os.path.join(ROOT, "src"), src / "src", ignore=_SKIP)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    build = tmp_path / "build"
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(build / "lib"),
                           "--build-temp", str(build / "temp")], cwd=src, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr  # the extension stays optional
    assert not list(build.rglob("_crop*.so"))
    return done


def test_build_without_jpeg_headers_warns(tmp_path):
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "jpeglib.h").write_text('#error "jpeglib.h: No such file or directory (hidden by the test)"\n')
    done = _build(tmp_path, CFLAGS=f"-I{hidden}")
    assert "2x slower" in done.stderr
    assert "jpeglib.h not found" in done.stderr
    assert "apt-get install gcc libjpeg62-turbo-dev" in done.stderr
    assert "turbofeed doctor" in done.stderr


def test_build_without_a_compiler_warns(tmp_path):
    done = _build(tmp_path, CC=str(tmp_path / "no-such-cc"))
    assert "2x slower" in done.stderr
    assert "no C compiler" in done.stderr
