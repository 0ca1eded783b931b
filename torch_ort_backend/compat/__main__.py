"""python -m torch_ort_backend.compat script.py [args]: runs an onnxruntime-training script on
torch_ort_backend (see torch_ort_backend.compat)."""

from __future__ import annotations

import os
import runpy
import sys

from . import install


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m torch_ort_backend.compat SCRIPT.py [ARGS...]\n"
              "Runs SCRIPT.py with onnxruntime-training's imports (onnxruntime.training, onnxruntime.capi."
              "ort_trainer, torch_ort) resolved to torch_ort_backend, for this process only.")
        return 0 if argv else 2
    script = argv[0]
    if not os.path.isfile(script):
        print(f"torch_ort_backend.compat: no such script: {script}", file=sys.stderr)
        return 2
    install()
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
