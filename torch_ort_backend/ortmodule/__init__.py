"""onnxruntime-training's ORTModule API on the "ort" backend (docs/ortmodule.md maps every name).

    from torch_ort_backend import ORTModule, DebugOptions, LogLevel
    model = ORTModule(model, DebugOptions(save_onnx=True, onnx_prefix="bert", log_level=LogLevel.INFO))
"""

from .debug_options import DebugOptions, LogLevel
from .module import ORTModule
from .profiling import end_profiling

__all__ = ["DebugOptions", "LogLevel", "ORTModule", "end_profiling"]
