"""torch_ort_backend: ONNX Runtime-style training and inference for current PyTorch, on its own
C++ engine.

Engine-level API (this release): InferenceSession, SessionOptions, GraphOptimizationLevel, and
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
from .session import (
    GraphOptimizationLevel,
    InferenceSession,
    NodeArg,
    SessionOptions,
    available_providers,
)

get_available_providers = available_providers

__version__ = "0.1.0"

__all__ = [
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
