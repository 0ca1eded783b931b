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
# The memory-optimizer tests read memory_stats(), which reports every compiled graph alive in the
# process: they run in a process of their own so that graphs other tests still hold cannot count.
MEMOPT=(tests/python/test_memory_optimizer.py tests/python/test_memory_optimizer_models.py)
pytest -q tests/python "${MEMOPT[@]/#/--ignore=}" "$@"
echo "==> Python tests of the memory optimizer (own process)"
pytest -q "${MEMOPT[@]}" "$@"
