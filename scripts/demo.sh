#!/usr/bin/env bash
# Set up (idempotent), make a small ImageNet-like dataset and stream it, printing images/s.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/turbofeed bench "$@"
