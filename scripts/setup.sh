#!/usr/bin/env bash
# Create .venv with turbofeed installed editable. PyTorch is pinned first so pip takes
# the CPU build (and never resolves a bare `torch` to a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==${TURBOFEED_TORCH_VERSION:-2.13.0}"
# the extension is built for the stable ABI (_crop.abi3.so); a per-version build left by an
# older checkout would be imported first and shadow it
rm -f src/turbofeed/decode/_crop.cpython-*.so
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
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
