#!/usr/bin/env bash
# Sets everything up, checks the style (scripts/lint.sh), then runs every test: the engine's
# GoogleTest suite (ctest) and pytest.
# Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
echo "==> style (clang-format, ruff)"
bash scripts/lint.sh
echo "==> C++ tests (ctest)"
ctest --test-dir build/py --output-on-failure -j2
echo "==> Python tests (pytest)"
pytest -q tests/python "$@"
