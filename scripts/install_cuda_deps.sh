#!/usr/bin/env bash
# Installs the CUDA libraries the CUDA toolkit does not ship with nvcc here (cuBLAS, NCCL) from
# NVIDIA's PyPI wheels into the active Python environment, where cmake/cuda.cmake finds them.
#
#   . .venv/bin/activate && scripts/install_cuda_deps.sh
#
# Does nothing when nvcc is absent (a CPU-only build needs none of this). Idempotent: pip skips
# requirements that are already satisfied. cuBLAS is pinned to the toolkit's major.minor so its
# headers match the toolkit's cudart headers; cudart itself comes from the toolkit and is linked
# statically, so no nvidia-cuda-runtime wheel is needed.
#
# Environment:
#   NVCC=/path/to/nvcc     nvcc to read the CUDA version from (default: nvcc on PATH, then
#                          /usr/local/cuda/bin/nvcc)
#   TOB_WITH_NCCL=1        also install NCCL (196 MB download, 209 MB installed). Off by default:
#                          nothing in the build links NCCL (scale-out goes through torch.distributed,
#                          which brings its own), and a CI machine's disk can be short.
#   PYTHON=python3         interpreter whose environment receives the wheels (default: python)
set -euo pipefail

nvcc_bin="${NVCC:-$(command -v nvcc || true)}"
if [[ -z "${nvcc_bin}" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc_bin=/usr/local/cuda/bin/nvcc; fi
if [[ -z "${nvcc_bin}" ]]; then
  echo "install_cuda_deps: nvcc not found; nothing to install (CPU-only build)."
  exit 0
fi

python_bin="${PYTHON:-python}"
if [[ -z "${VIRTUAL_ENV:-}" && -z "${CONDA_PREFIX:-}" ]]; then
  echo "install_cuda_deps: warning: no virtual environment is active; installing into $(${python_bin} -c 'import sys; print(sys.prefix)')" >&2
fi

# "Cuda compilation tools, release 13.0, V13.0.88" -> 13 and 0
release="$("${nvcc_bin}" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')"
read -r cuda_major cuda_minor <<<"${release}"
if [[ -z "${cuda_major}" ]]; then
  echo "install_cuda_deps: cannot read the CUDA version from '${nvcc_bin} --version'" >&2
  exit 1
fi
echo "install_cuda_deps: CUDA ${cuda_major}.${cuda_minor} (${nvcc_bin})"

case "${cuda_major}" in
  12)
    # CUDA 12 wheels carry a -cu12 suffix.
    requirements=("nvidia-cublas-cu12==12.${cuda_minor}.*")
    nccl="nvidia-nccl-cu12==2.27.*"
    ;;
  13)
    # From CUDA 13 on, cuBLAS drops the suffix (nvidia-cublas); NCCL keeps it (nvidia-nccl-cu13).
    # NCCL 2.28 is the CUDA 13.0-era release: 196 MB against 305 MB for 2.32.
    requirements=("nvidia-cublas==13.${cuda_minor}.*")
    nccl="nvidia-nccl-cu13==2.28.*"
    ;;
  *)
    echo "install_cuda_deps: CUDA ${cuda_major} is not supported (need 12 or 13)" >&2
    exit 1
    ;;
esac
if [[ "${TOB_WITH_NCCL:-0}" == "1" ]]; then requirements+=("${nccl}"); fi

# cuBLAS alone is a 421 MB download that unpacks to 568 MB: say up front when the disk cannot hold
# it (pip's own message comes only after minutes of downloading). --no-cache-dir: a second copy in
# pip's cache would double the download's footprint for no later use.
free_mb="$(${python_bin} -c 'import shutil, sys; print(shutil.disk_usage(sys.prefix).free // 2**20)')"
echo "install_cuda_deps: pip install ${requirements[*]} (${free_mb} MiB free)"
installed="$(${python_bin} -c "import importlib.metadata as m, sys
try: m.version(sys.argv[1]); print(1)
except m.PackageNotFoundError: print(0)" "${requirements[0]%%==*}")"
if (( free_mb < 1200 )) && [[ "${installed}" == 0 ]]; then
  echo "install_cuda_deps: only ${free_mb} MiB free on the disk of $(${python_bin} -c 'import sys; print(sys.prefix)');" \
       "the cuBLAS wheel needs about 1000 MiB while it installs (and the build about 800 MiB more)" >&2
fi
"${python_bin}" -m pip install --no-deps --no-cache-dir "${requirements[@]}"
