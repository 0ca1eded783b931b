#!/usr/bin/env bash
# Style checks, run by scripts/test.sh (and so by CI) before the tests; fails on any violation.
#   C++/CUDA: clang-format (.clang-format) on csrc/, kernels/, tests/cpp/ and benchmarks/, check only.
#             Fix with: clang-format -i <files>
#   Python:   ruff (ruff.toml). Fix with: ruff check --fix .
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
[ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ] && . .venv/bin/activate
echo "==> clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1)"
find csrc kernels tests/cpp benchmarks \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) -print0 |
  xargs -0 clang-format --dry-run --Werror
echo "==> ruff $(ruff --version | cut -d' ' -f2)"
ruff check .
