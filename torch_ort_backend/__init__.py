"""torch_ort_backend: ONNX Runtime-style training and inference for current PyTorch, on its own
C++ engine.

- ``torch.compile(model, backend="ort")``: registered through the ``torch_dynamo_backends`` entry
  point, so no import of this package is needed (torch_ort_backend.backend).
- Engine-level API: InferenceSession, SessionOptions, GraphOptimizationLevel, and
  ``torch_ort_backend.onnx_backend`` for the onnx backend-test interface.
- onnxruntime-training's API: ORTModule, DebugOptions, LogLevel (torch_ort_backend.ortmodule),
  loaded on first use so that ``import torch_ort_backend`` does not load TorchDynamo.
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


_ORTMODULE_NAMES = ("DebugOptions", "LogLevel", "ORTModule", "end_profiling")


def __getattr__(name: str):
    if name in _ORTMODULE_NAMES:
        from . import ortmodule

        return getattr(ortmodule, name)
    raise AttributeError(f"module 'torch_ort_backend' has no attribute '{name}'")


__all__ = [
    "BadInitializationError",
    "DebugOptions",
    "LogLevel",
    "ORTModule",
    "end_profiling",
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
