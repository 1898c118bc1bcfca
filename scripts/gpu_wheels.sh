#!/usr/bin/env bash
# Put in DIR (default .whl/, git-ignored) every wheel the GPU machine lacks for the GPU check
# (scripts/gpu_check.sh): CPython 3.12, manylinux x86_64, no internet there. It holds
#   - turbofeed's own cp311-abi3 wheel (scripts/wheel.sh; libjpeg-turbo bundled: that machine
#     has no libjpeg headers, so it cannot build the native decoder);
#   - simplejpeg, google-crc32c and braceexpand (core dependencies, not installed there);
#   - KvikIO for CUDA 13: kvikio-cu13, libkvikio-cu13, rapids-logger (cupy-cuda13x,
#     cuda-pathfinder, cuda-toolkit and numpy are there already);
#   - with GPU_WHEELS_NVIMGCODEC=1, nvImageCodec for CUDA 13 and the nvJPEG it loads (about
#     29 MiB; off by default: `gpu_decode=True` would prefer it over torchvision's nvJPEG);
#   - make_imagenet_like.py, the benchmark-data generator (from shared/bench or ../shared/bench:
#     a folder beside the checkout does not travel with it).
# Then checks, against scripts/gpu_machine_packages.txt (the machine's package list), that
# every requirement of every wheel is either there or in DIR, that each name comes once, and
# that DIR holds at most GPU_WHEELS_BUDGET_MIB (default 60) MiB: over it, KvikIO is dropped
# with a warning if that alone makes it fit, else the script fails.
#
# Usage: scripts/gpu_wheels.sh [DIR]          build and download, then check
#        scripts/gpu_wheels.sh --check DIR    only the checks, on what DIR holds
#   PYTHON=...            interpreter for pip and wheel.sh (>= 3.11 for the abi3 wheel)
#   TURBOFEED_WHEEL=FILE  use this turbofeed wheel instead of building one
# Needs the package registry (pip download) and what scripts/wheel.sh needs.
set -euo pipefail

die() { echo "gpu_wheels.sh: error: $*" >&2; exit 1; }
check_only=0
if [ "${1:-}" = "--check" ]; then check_only=1; shift; [ $# -eq 1 ] || die "usage: scripts/gpu_wheels.sh --check DIR"; fi
[ $# -le 1 ] || { echo "usage: scripts/gpu_wheels.sh [DIR] | --check DIR" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "${1:-$ROOT/.whl}"
DIR=$(cd "${1:-$ROOT/.whl}" && pwd)
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
BUDGET_MIB=${GPU_WHEELS_BUDGET_MIB:-60}

# The versions checked against the machine's libraries (shared review of 2026-11-26).
PINS=("simplejpeg==1.9.*" "google-crc32c==1.*" "braceexpand==0.1.*" "kvikio-cu13==26.10.*" "libkvikio-cu13==26.10.*" "rapids-logger==0.3.*")
[ "${GPU_WHEELS_NVIMGCODEC:-0}" = 1 ] && PINS+=("nvidia-nvimgcodec-cu13==0.9.*" "nvidia-nvjpeg==13.0.*")

if [ "$check_only" = 0 ]; then
    rm -f "$DIR"/*.whl "$DIR"/make_imagenet_like.py  # a rerun starts clean: one version of each
    if [ -n "${TURBOFEED_WHEEL:-}" ]; then
        cp "$TURBOFEED_WHEEL" "$DIR/"
    else
        PYTHON=$PYTHON bash "$ROOT/scripts/wheel.sh" "$DIR" | sed 's/^/  /'
    fi
    ls "$DIR"/turbofeed-*-abi3-*.whl >/dev/null 2>&1 || die "no abi3 turbofeed wheel in $DIR (build with Python >= 3.11)"
    platforms=(--platform manylinux2014_x86_64)
    for n in 17 24 27 28 31 34 35 39; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
    echo "gpu_wheels.sh: downloading ${PINS[*]} (cp312, manylinux x86_64)"
    "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp "${platforms[@]}" -d "$DIR" "${PINS[@]}" \
        || die "pip download failed (the registry is needed here, not on the GPU machine)"
    gen=""
    for candidate in "$ROOT/shared/bench/make_imagenet_like.py" "$ROOT/../shared/bench/make_imagenet_like.py"; do
        [ -f "$candidate" ] && { gen=$candidate; break; }
    done
    if [ -n "$gen" ]; then
        cp "$gen" "$DIR/make_imagenet_like.py"
    else
        echo "gpu_wheels.sh: warning: no shared/bench/make_imagenet_like.py: the check will use turbofeed's own generator" >&2
    fi
fi

# --- the checks: requirements, one version each, the size budget -------------------------
"$PYTHON" - "$DIR" "$ROOT/scripts/gpu_machine_packages.txt" "$BUDGET_MIB" <<'PY'
import os, re, sys, zipfile
from email.parser import Parser

folder, machine_list, budget_mib = sys.argv[1], sys.argv[2], float(sys.argv[3])
KVIKIO = {"kvikio-cu13", "libkvikio-cu13", "rapids-logger"}


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def fail(message):
    sys.exit(f"gpu_wheels.sh: error: {message}")


machine = {norm(line.strip()) for line in open(machine_list) if line.strip() and not line.startswith("#")}
wheels = sorted(f for f in os.listdir(folder) if f.endswith(".whl"))
if not wheels:
    fail(f"no wheels in {folder}")
meta, names = {}, {}
for wheel in wheels:
    with zipfile.ZipFile(os.path.join(folder, wheel)) as zf:
        path = next(n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        info = Parser().parsestr(zf.read(path).decode("utf-8"))
    name = norm(info["Name"])
    if name in names:
        fail(f"two versions of {name}: {names[name]} and {wheel} (pip install refuses both)")
    names[name], meta[name] = wheel, info
    python_tag, abi, platform = wheel[:-4].split("-")[-3:]
    fits_python = any(t in ("py3", "cp312") or (abi == "abi3" and t.startswith("cp3") and int(t[3:]) <= 12)
                      for t in python_tag.split(".")) and abi in ("none", "abi3", "cp312")
    fits_platform = platform == "any" or any(p.startswith("manylinux") and p.endswith("x86_64")
                                             for p in platform.split("."))
    if not (fits_python and fits_platform):
        fail(f"{wheel} does not install on CPython 3.12, manylinux x86_64")

env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
try:
    from packaging.markers import Marker
except ImportError:
    Marker = None
missing = []
for name, info in meta.items():
    for req in info.get_all("Requires-Dist") or []:
        spec, _, marker = req.partition(";")
        if "extra" in marker:
            continue  # an extra nobody asks for here
        if marker.strip() and Marker is not None and not Marker(marker).evaluate(env):
            continue
        dep = norm(re.match(r"\s*([A-Za-z0-9._-]+)", spec).group(1))
        if dep not in machine and dep not in names:
            missing.append(f"{dep} (needed by {names[name]})")
if missing:
    fail("wheels needed but neither on the GPU machine nor in the folder: " + ", ".join(sorted(set(missing))))

def size(files):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in files)

others = [f for f in os.listdir(folder) if not f.endswith(".whl") and os.path.isfile(os.path.join(folder, f))]
total = size(wheels + others)
budget = budget_mib * 2**20
if total > budget:
    kv = [names[n] for n in KVIKIO if n in names]
    if kv and total - size(kv) <= budget:
        print(f"gpu_wheels.sh: WARNING: {total / 2**20:.1f} MiB is over the {budget_mib:g} MiB budget; dropping "
              f"KvikIO ({size(kv) / 2**20:.1f} MiB: {', '.join(kv)}): the check's KvikIO rows will be skipped",
              file=sys.stderr)
        for f in kv:
            os.remove(os.path.join(folder, f))
            wheels.remove(f)
        total = size(wheels + others)
    else:
        fail(f"{folder} holds {total / 2**20:.1f} MiB, over the {budget_mib:g} MiB budget "
             f"(GPU_WHEELS_BUDGET_MIB); the working tree and the wheels travel in 64 MiB together")
for f in sorted(wheels + others):
    print(f"  {os.path.getsize(os.path.join(folder, f)) / 2**20:7.2f} MiB  {f}")
print(f"gpu_wheels.sh: {folder}: {len(wheels)} wheels, {total / 2**20:.1f} MiB of {budget_mib:g} MiB; "
      "every requirement is on the GPU machine or here")
PY
