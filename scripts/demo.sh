#!/usr/bin/env bash
# Sets everything up, then runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
python examples/demo.py "$@"
