"""torch.autograd.Function inside compiled graphs: PythonOp / PythonOpGrad (docs/python_op.md).

- capture.py: TorchDynamo hook; ``Fn.apply(...)`` in an "ort" region becomes a tob::python_op call
- custom_ops.py: tob::python_op / tob::python_op_grad (fake, autograd and CPU implementations)
- probe.py: output metadata of a Function without compiling it
- runtime.py: forward and backward at run time, the ctx table
- registry.py: the process-local Function and object tables, constant encoding
- graph_rewrite.py: the backend's pass over TorchDynamo's graph (activation checkpointing)
"""

from __future__ import annotations

from .capture import install as install_capture
from .capture import is_enabled, set_enabled
from .custom_ops import define as _define_ops
from .registry import PythonOpError, qualified_name, register_function, register_function_for_loaded_models
from .runtime import live_contexts


def enable_custom_autograd_support(to_enable: bool = True) -> None:
    """Process-wide switch (onnxruntime-training's name): with False, torch.autograd.Functions in
    regions compiled afterwards are traced through (inlined) instead of becoming PythonOps. Graphs
    already compiled keep what they were compiled with (torch._dynamo.reset() recompiles)."""
    set_enabled(to_enable)


# The operators PythonOp nodes call exist as soon as the package is imported (a saved model may be
# run without compiling anything); the TorchDynamo hook is installed by the backend (backend.py).
_define_ops()

__all__ = [
    "PythonOpError",
    "enable_custom_autograd_support",
    "install_capture",
    "is_enabled",
    "live_contexts",
    "qualified_name",
    "register_function",
    "register_function_for_loaded_models",
]
