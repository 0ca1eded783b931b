"""FX (ATen) -> ONNX: one converter per op (registry.py), grouped by family (ops_*.py); ops without a
converter become ATen nodes run by torch inside the engine."""

from .errors import ExportError, UnsupportedTorchModelError
from .graph_exporter import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET, ExportedGraph, export_fx_graph

__all__ = [
    "DEFAULT_OPSET",
    "MAX_OPSET",
    "MIN_OPSET",
    "ExportError",
    "ExportedGraph",
    "UnsupportedTorchModelError",
    "export_fx_graph",
]
