"""``import turbofeed`` works where simplejpeg or tqdm is missing (a GPU machine with a fixed
environment and no internet): a JPEG decode on the CPU then says which package to install,
progress bars are left out, and everything else runs.

Each case runs in a real child process in which the two packages cannot be imported (a
meta-path finder refuses them before anything else is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BLOCK = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("simplejpeg", "tqdm"):
            raise ModuleNotFoundError(f"No module named {name!r} (refused by the test)", name=name)
sys.meta_path.insert(0, Refuse())
"""

CHILD = BLOCK + r"""
import io, json, os, sys, tempfile
import numpy as np
from PIL import Image
import turbofeed
from turbofeed import transforms as T
from turbofeed._datagen import make_imagenet_like
from turbofeed.decode import cpu
from turbofeed.decode.probe import probe

report = {"modules": sorted(m for m in sys.modules if m.split(".")[0] in ("simplejpeg", "tqdm"))}
png = io.BytesIO()
Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(png, "PNG")
report["png"] = list(cpu.decode_pillow(png.getvalue()).shape)
with tempfile.TemporaryDirectory() as tmp:
    shards = make_imagenet_like(tmp, count=4, per_shard=4, progress=True)  # progress: no tqdm, no bar
    report["shards"] = len(shards)
    jpeg = open(os.path.join(os.path.dirname(turbofeed.__file__), "_photos", "chelsea.jpg"), "rb").read()
    try:
        cpu.decode_jpeg(jpeg)
    except ImportError as exc:
        report["decode_error"] = str(exc)
print(json.dumps(report))
"""


def test_import_turbofeed_without_simplejpeg_and_tqdm(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TURBOFEED_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["modules"] == []  # neither was imported
    assert report["png"] == [8, 8, 3] and report["shards"] == 1
    assert "simplejpeg" in report["decode_error"] and "pip install 'simplejpeg" in report["decode_error"]


def test_the_stand_in_module_is_the_real_one_after_first_use():
    from turbofeed._deps import simplejpeg

    import simplejpeg as real

    assert simplejpeg.decode_jpeg_header is real.decode_jpeg_header  # first read imports
    assert "decode_jpeg" in vars(simplejpeg)  # later reads are plain attribute lookups
