#!/usr/bin/env python3
"""Create one virtual environment per peer loader under bench/.venvs/<peer>, installed as
../shared/bench/PEERS.md describes, so each peer runs with exactly its own dependencies.

    python bench/envs.py                     # all peers
    python bench/envs.py --peers dali,ffcv   # some

Idempotent: a venv whose install finished (marker file) is skipped. apt packages are
installed when missing (root needed, as on the benchmark machines).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENVS = os.path.join(HERE, ".venvs")
ROOT = os.path.dirname(HERE)
TORCH = "torch==2.13.0"  # the CPU build from local disk; never a multi-GB CUDA build

# peer -> (apt packages, pip requirement groups installed in order, module to report the version of)
PEERS: dict[str, tuple[list[str], list[list[str]], str]] = {
    "pytorch": ([], [[TORCH], ["pillow", "numpy"]], "torch"),
    "webdataset": ([], [[TORCH], ["webdataset==1.0.2", "pillow", "numpy"]], "webdataset"),
    "dali": ([], [["nvidia-dali-cuda120", "numpy"]], "nvidia.dali"),
    "ffcv": (["libopencv-dev", "libturbojpeg0-dev", "pkg-config"],
             [[TORCH], ["numpy<2", "opencv-python-headless<4.11", "pillow", "numba", "cython"], ["ffcv==1.0.2"]],
             "ffcv"),
    "spdl": (["libavutil57", "libavcodec59", "libavformat59", "libavfilter8", "libavdevice59", "libswscale6",
              "libswresample4"], [["spdl", "numpy"]], "spdl"),
    "turboloader": ([], [["turboloader==2.39.0", "numpy"]], "turboloader"),
    "turbofeed": ([], [[TORCH], ["-e", ROOT]], "turbofeed"),
    "ceiling": ([], [["simplejpeg", "numpy"]], "simplejpeg"),
    "data": ([], [["pillow", "numpy", "scikit-image", "scikit-learn", "matplotlib"]], "matplotlib"),
}


def python_of(peer: str) -> str:
    return os.path.join(VENVS, peer, "bin", "python")


def ready(peer: str) -> bool:
    return os.path.exists(os.path.join(VENVS, peer, ".complete"))


def apt_install(packages: list[str]) -> None:
    missing = [p for p in packages
               if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if missing:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def build(peer: str) -> dict:
    apt, groups, module = PEERS[peer]
    path = os.path.join(VENVS, peer)
    if ready(peer):
        return json.load(open(os.path.join(path, ".complete")))
    shutil.rmtree(path, ignore_errors=True)
    apt_install(apt)
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    pip = [python_of(peer), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for group in groups:
        # --no-build-isolation for ffcv: its setup.py imports numpy/cv2 from the venv.
        extra = ["--no-build-isolation"] if peer == "ffcv" and group == ["ffcv==1.0.2"] else []
        subprocess.run([*pip, *extra, *group], check=True)
    version = subprocess.run([python_of(peer), "-c", f"import importlib.metadata as m, {module} as x; "
                              f"print(getattr(x, '__version__', ''))"], capture_output=True, text=True)
    info = {"peer": peer, "version": version.stdout.strip(), "ok": version.returncode == 0}
    with open(os.path.join(path, ".complete"), "w") as f:
        json.dump(info, f)
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma list of {sorted(PEERS)}")
    args = ap.parse_args()
    for peer in args.peers.split(","):
        try:
            print(json.dumps(build(peer)), flush=True)
        except subprocess.CalledProcessError as exc:
            print(json.dumps({"peer": peer, "ok": False, "error": str(exc)}), flush=True)


if __name__ == "__main__":
    main()
