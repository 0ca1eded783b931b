#!/usr/bin/env bash
# Sets up everything on a fresh machine, idempotently: system build tools, the .venv with the
# pinned dev/test dependencies, and an editable build of the package (engine, _C binding and the
# engine's GoogleTest suite, all in build/py).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
[ -f /usr/include/re2/re2.h ] || missing+=(libre2-dev)  # RegexFullMatch (docs/dependencies.md)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || missing+=(g++)
command -v ccache >/dev/null || missing+=(ccache)  # rebuilds on the same machine are near-free
command -v clang-format >/dev/null || missing+=(clang-format)  # scripts/lint.sh (Debian 12: version 14)
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing system packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# A fresh machine gains nothing from pip's cache, and a CI machine's disk can be short: no second
# copy of every wheel (the CUDA ones alone are 600 MB).
export PIP_NO_CACHE_DIR="${PIP_NO_CACHE_DIR:-1}"
echo "==> disk: $(df -Pm . | awk 'NR==2 {print $4}') MiB free in $(pwd)"

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
echo "==> installing Python dependencies"
pip install -q --disable-pip-version-check -r requirements-dev.txt 2>&1 | grep -v "is ignored: it is neither" || true
python -c "import torch, onnx, onnxruntime, scipy_openblas32" # fail here, loudly, if an install failed

if command -v nvcc >/dev/null && [ -f scripts/install_cuda_deps.sh ]; then
  bash scripts/install_cuda_deps.sh
fi

echo "==> building torch_ort_backend (engine, binding, C++ tests) in build/py"
pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . \
  -Cbuild-dir=build/py -Ccmake.define.TOB_BUILD_TESTS=ON 2>&1 | grep -v "is ignored: it is neither" || true
python -c "import torch_ort_backend" # the build must import
