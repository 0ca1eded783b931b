"""Loads the compiled engine (torch_ort_backend._C), after torch.

The extension links OpenBLAS from the scipy-openblas32 wheel and finds it through an rpath; when
the package was installed some other way (an unusual site layout), the library is loaded by
absolute path first so the import still works.
"""

from __future__ import annotations

import ctypes
import os

# _C links libtorch (the ATen provider) against the torch installed here: importing torch first
# loads its libraries and registers its operators (including the Python-defined ones) before
# any ATen node is resolved.
import torch  # noqa: F401

try:
    from . import _C  # noqa: F401
except ImportError as first_error:  # pragma: no cover - depends on the install layout
    if "scipy_openblas" not in str(first_error):
        raise
    import scipy_openblas32

    ctypes.CDLL(
        os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so"), mode=ctypes.RTLD_GLOBAL
    )
    from . import _C  # noqa: F401

C = _C

# The domain of onnxruntime's contrib and training ops: the engine's one constant (core/domain.h).
MS_DOMAIN: str = _C.MICROSOFT_DOMAIN

# A NodeProto metadata_props key: the node recomputes a forward value for the backward (the memory
# optimizer's copies). The engine marks it (Node::recompute) and never merges it back into the original.
RECOMPUTE_KEY: str = "tob.recompute"

EngineError = _C.EngineError
InvalidArgumentError = _C.InvalidArgumentError
InvalidModelError = _C.InvalidModelError
NotImplementedOpError = _C.NotImplementedOpError
OutOfMemoryError = _C.OutOfMemoryError
KernelError = _C.KernelError
OpNotAllowedError = _C.OpNotAllowedError
