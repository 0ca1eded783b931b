"""torch_ort_backend: ONNX Runtime-style training and inference for current PyTorch, on its own
C++ engine.

- ``torch.compile(model, backend="ort")``: registered through the ``torch_dynamo_backends`` entry
  point, so no import of this package is needed (torch_ort_backend.backend).
- Engine-level API: InferenceSession, SessionOptions, GraphOptimizationLevel, and
  ``torch_ort_backend.onnx_backend`` for the onnx backend-test interface.
"""

from ._engine import (
    EngineError,
    InvalidArgumentError,
    InvalidModelError,
    KernelError,
    NotImplementedOpError,
    OutOfMemoryError,
)
from .errors import (
    BadInitializationError,
    FallbackError,
    UnsupportedDataError,
    UnsupportedDeviceError,
    UnsupportedOnnxModelError,
    UnsupportedTorchModelError,
)
from .fallback import FallbackPolicy, FallbackWarning
from .session import (
    GraphOptimizationLevel,
    InferenceSession,
    NodeArg,
    SessionOptions,
    available_providers,
)

get_available_providers = available_providers

__version__ = "0.1.0"


def compile_stats():
    """Counters of the "ort" backend: graphs compiled, exports, sessions created and reused, runs,
    fallbacks and the ATen ops that ran through the fallback provider."""
    from .backend import compile_stats as stats

    return stats()


__all__ = [
    "BadInitializationError",
    "FallbackError",
    "FallbackPolicy",
    "FallbackWarning",
    "UnsupportedDataError",
    "UnsupportedDeviceError",
    "UnsupportedOnnxModelError",
    "UnsupportedTorchModelError",
    "compile_stats",
    "EngineError",
    "GraphOptimizationLevel",
    "InferenceSession",
    "InvalidArgumentError",
    "InvalidModelError",
    "KernelError",
    "NodeArg",
    "NotImplementedOpError",
    "OutOfMemoryError",
    "SessionOptions",
    "available_providers",
    "get_available_providers",
]
