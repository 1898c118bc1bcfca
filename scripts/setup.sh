#!/usr/bin/env bash
# Create .venv with PyTorch and turbofeed installed editable (idempotent).
#
# Usage: scripts/setup.sh [demo|test]
#   demo   turbofeed's core dependencies only (NumPy, Pillow, ...): without PyTorch, the demo's
#          `turbofeed bench` streams through turbofeed.Pipeline, the same engine
#   test   PyTorch and the `test` extra (default): every library the test suite uses, DALI's
#          424 MB wheel included, and in CI the tar programs and Azurite the tests compare with
#
# For `test`, PyTorch is installed first, with an exact version, so the `torch>=2.1` of
# turbofeed's extras is already met and pip never picks a build by itself. Which build:
#   - TURBOFEED_TORCH_INDEX=URL set: torch from that index only (`pip --index-url URL`),
#     e.g. https://download.pytorch.org/whl/cu126 for a given CUDA version;
#   - an NVIDIA GPU here (nvidia-smi lists one): the index pip is configured with, PyPI by
#     default, whose Linux wheel is the CUDA build (several GB with its nvidia-* wheels);
#   - no GPU: the CPU-only build. When pip's own index offers it (a local mirror, as on the
#     project's machines) from there, else from PyTorch's CPU wheel index
#     (https://download.pytorch.org/whl/cpu, about 200 MB), since PyPI's is the CUDA build.
# TURBOFEED_TORCH_VERSION picks another version than 2.13.0.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-test}
case "$MODE" in
    demo) TARGET="." ;;
    test) TARGET=".[test]" ;;
    *) echo "usage: scripts/setup.sh [demo|test]" >&2; exit 2 ;;
esac
TORCH="torch==${TURBOFEED_TORCH_VERSION:-2.13.0}"
CPU_INDEX=https://download.pytorch.org/whl/cpu
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi

# --- PyTorch (tests only): the CUDA build where a GPU is, the CPU-only build elsewhere ---
have=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null || true)
if [ "$MODE" = demo ] || [ "${have%%+*}" = "${TORCH#torch==}" ]; then
    :  # the demo needs none; or already there (a rerun): whichever build it is, keep it
elif [ -n "${TURBOFEED_TORCH_INDEX:-}" ]; then
    "${PIP[@]}" --index-url "$TURBOFEED_TORCH_INDEX" "$TORCH"
elif nvidia-smi -L >/dev/null 2>&1; then
    "${PIP[@]}" "$TORCH"
else
    # which build pip's configured index would give, without installing it (metadata only)
    offered=$(.venv/bin/python -m pip install -q --disable-pip-version-check --dry-run --no-deps \
                  --report - "$TORCH" 2>/dev/null \
              | .venv/bin/python -c "import json, sys; print(json.load(sys.stdin)['install'][0]['metadata']['version'])" \
                  2>/dev/null || true)
    if [ "${offered#*+}" = cpu ]; then
        "${PIP[@]}" "$TORCH"
    else
        echo "setup.sh: no NVIDIA GPU here: the CPU-only build of $TORCH from $CPU_INDEX"
        "${PIP[@]}" --index-url "$CPU_INDEX" "$TORCH"
    fi
fi

# the extension is built for the stable ABI (_crop.abi3.so); a per-version build left by an
# older checkout would be imported first and shadow it
rm -f src/turbofeed/decode/_crop.cpython-*.so
# turbofeed editable, skipped on a rerun when nothing it is built from changed: the stamp
# holds the mode and a hash of the metadata and the C sources (remove it to reinstall)
STAMP=.venv/.turbofeed-setup
built_from=$(cat pyproject.toml setup.py src/turbofeed/decode/csrc/* | sha256sum | cut -d' ' -f1)
stamp=$(cat "$STAMP" 2>/dev/null || true)
editable_here() {  # the venv's turbofeed is this checkout's src/
    .venv/bin/python -c "import importlib.util as u, os, sys; s = u.find_spec('turbofeed'); \
sys.exit(0 if s and s.origin and os.path.samefile(os.path.dirname(s.origin), sys.argv[1]) else 1)" \
        src/turbofeed 2>/dev/null
}
if { [ "$stamp" = "$MODE $built_from" ] || [ "$stamp" = "test $built_from" ]; } \
        && compgen -G "src/turbofeed/decode/_crop*.so" >/dev/null && editable_here; then
    :  # installed from these sources already (a test install serves the demo too)
else
    rm -f "$STAMP"
    "${PIP[@]}" -e "$TARGET"
    echo "$MODE $built_from" >"$STAMP"
fi
[ "$MODE" = test ] || exit 0

# Tar programs the tar-index tests compare against (tests/io/local/test_tarscan_tools.py:
# bsdtar and busybox tar; GNU tar is always there). Optional: CI as root with apt-get
# installs them, anywhere else those tests skip, naming the program.
if [ "${CI:-}" = "true" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
        && ! { command -v bsdtar >/dev/null && command -v busybox >/dev/null; }; then
    { timeout 300 apt-get update -q && timeout 300 apt-get install -y -q libarchive-tools busybox; } >/dev/null 2>&1 \
        || echo "setup.sh: could not install bsdtar/busybox; their tar tests will skip"
fi
# Azurite, the Azure Storage emulator (npm), for the az:// tests (tests/io/stores/), into the
# git-ignored .tools/. Optional: CI with npm installs it, anywhere else those tests skip, saying so.
if [ "${CI:-}" = "true" ] && command -v npm >/dev/null && [ ! -x .tools/node_modules/.bin/azurite-blob ]; then
    mkdir -p .tools
    (cd .tools && timeout 300 npm install --no-audit --no-fund --silent azurite@3) >/dev/null 2>&1 \
        || echo "setup.sh: could not install Azurite (npm); the az:// tests will skip"
fi
