"""torch_ort_backend: ONNX Runtime-style training and inference for current PyTorch, on its own
C++ engine.

- ``torch.compile(model, backend="ort")``: registered through the ``torch_dynamo_backends`` entry
  point, so no import of this package is needed (torch_ort_backend.backend).
- Engine-level API: InferenceSession, SessionOptions, GraphOptimizationLevel, and
  ``torch_ort_backend.onnx_backend`` for the onnx backend-test interface.
- onnxruntime-training's API: ORTModule, DebugOptions, LogLevel (torch_ort_backend.ortmodule),
  loaded on first use so that ``import torch_ort_backend`` does not load TorchDynamo.
- torch.autograd.Functions in compiled regions run as PythonOp / PythonOpGrad nodes
  (torch_ort_backend.autograd_function, docs/python_op.md): enable_custom_autograd_support,
  register_autograd_function.
- ORTTrainer's configuration: ORTTrainerOptions (torch_ort_backend.trainer), the optimizer configs
  and lr schedulers (torch_ort_backend.optim), loss scalers (torch_ort_backend.amp); loaded on first
  use so that ``import torch_ort_backend`` does not load the options' validation library
  (docs/orttrainer.md).
"""

from ._engine import (
    EngineError,
    InvalidArgumentError,
    InvalidModelError,
    KernelError,
    NotImplementedOpError,
    OpNotAllowedError,
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
from . import autograd_function as _autograd_function  # defines the torch ops PythonOp nodes call

get_available_providers = available_providers

__version__ = "0.1.0"


def compile_stats():
    """Counters of the "ort" backend: graphs compiled, exports, sessions created and reused, runs,
    fallbacks and the ATen ops that ran through the fallback provider."""
    from .backend import compile_stats as stats

    return stats()


def memory_stats() -> dict:
    """The engine's peak memory at the last forward and backward run of each compiled graph:
    forward_peak_bytes, backward_peak_bytes (with the stashed activations it reads),
    step_peak_bytes and per-graph figures (docs/memory_optimizer.md, "Peak memory")."""
    from .memory_optimizer.step_memory import memory_stats as stats

    return stats()


def enable_custom_autograd_support(to_enable: bool = True) -> None:
    """onnxruntime-training's switch: with True (the default) a torch.autograd.Function in a region
    compiled by "ort" runs as a PythonOp / PythonOpGrad pair; with False, Functions in regions
    compiled afterwards are traced through instead (docs/python_op.md)."""
    _autograd_function.enable_custom_autograd_support(to_enable)


def register_autograd_function(fn_cls: type) -> str:
    """Lets PythonOp nodes of models loaded in this process (e.g. an ONNX file saved by another
    process) call `fn_cls`; returns the name such nodes use. Without it, a loaded model's PythonOp
    can call no Function, not even one this process compiled (docs/security.md). Nothing is ever
    imported by the name a node carries."""
    return _autograd_function.register_function_for_loaded_models(fn_cls)


_ORTMODULE_NAMES = ("DebugOptions", "LogLevel", "ORTModule", "end_profiling")
_TRAINER_NAMES = ("ORTTrainer", "ORTTrainerOptions")
_LAZY_MODULES = ("amp", "optim")


def __getattr__(name: str):
    if name in _ORTMODULE_NAMES:
        from . import ortmodule

        return getattr(ortmodule, name)
    if name in _TRAINER_NAMES:
        from . import trainer

        return getattr(trainer, name)
    if name in _LAZY_MODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'torch_ort_backend' has no attribute '{name}'")


__all__ = [
    "BadInitializationError",
    "DebugOptions",
    "LogLevel",
    "ORTModule",
    "ORTTrainer",
    "ORTTrainerOptions",
    "amp",
    "end_profiling",
    "FallbackError",
    "FallbackPolicy",
    "FallbackWarning",
    "UnsupportedDataError",
    "UnsupportedDeviceError",
    "UnsupportedOnnxModelError",
    "UnsupportedTorchModelError",
    "compile_stats",
    "memory_stats",
    "enable_custom_autograd_support",
    "register_autograd_function",
    "EngineError",
    "GraphOptimizationLevel",
    "InferenceSession",
    "InvalidArgumentError",
    "InvalidModelError",
    "KernelError",
    "NodeArg",
    "NotImplementedOpError",
    "OpNotAllowedError",
    "OutOfMemoryError",
    "SessionOptions",
    "available_providers",
    "get_available_providers",
    "optim",
]
