#!/usr/bin/env bash
# Set up (idempotent) and run the test suite: every test (what CI runs, .ci/run).
#
# Usage: scripts/test.sh [--fast] [PYTEST ARGS...]
#   --fast   leave out the tiers tests/tiers.py names (slow, subprocess, gpu, packaging):
#            the rest runs in under a minute on 2 cores (docs/testing.md)
# Other arguments go to pytest as they are: a file, a folder, -k EXPR, -m EXPR, -x ...
set -euo pipefail
cd "$(dirname "$0")/.."
FAST="not slow and not subprocess and not gpu and not packaging"
args=()
for arg in "$@"; do
    if [ "$arg" = --fast ]; then args+=(-m "$FAST"); else args+=("$arg"); fi
done
bash scripts/setup.sh test
# pytest keeps the assertion-rewritten test modules in __pycache__ only where bytecode may be
# written: with PYTHONDONTWRITEBYTECODE set it rewrites all 160 files on every run (about 18
# of the 27 s a collection takes on 2 cores)
exec env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -q ${args[@]+"${args[@]}"}
