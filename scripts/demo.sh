#!/usr/bin/env bash
# Set up (idempotent; turbofeed with its core dependencies and PyTorch, not the test
# extras), make a small ImageNet-like dataset and stream it, printing images/s.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
exec .venv/bin/turbofeed bench "$@"
