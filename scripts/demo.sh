#!/usr/bin/env bash
# Set up (idempotent; turbofeed with its core dependencies only: no PyTorch, no test
# extras), make a small ImageNet-like dataset and stream it, printing images/s (through
# turbofeed.Pipeline without PyTorch, turbofeed.DataLoader with it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
exec .venv/bin/turbofeed bench "$@"
