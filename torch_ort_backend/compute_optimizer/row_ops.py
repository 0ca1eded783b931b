"""Which ops of a TorchDynamo graph act on each row independently (a "row" is one position of the
leading dimensions: one token), so that selecting rows before the op gives the rows of its result.

The label-sparsity pass moves a row selection up through such ops (label_sparsity.py). An op
qualifies when its result's row r depends only on its *primary* input's row r, and every other
tensor argument is the same for every row: weights (linear, layer norm), a bias or a scalar
broadcast over the last dimension. Layout ops (view, reshape, flatten, contiguous, full slices) whose
result keeps the input's last dimension keep the flattened rows in the same order (a reshape never
reorders elements), so a selection of flattened rows passes through them unchanged. Anything else
(attention, a residual add of two row tensors, a slice of the rows, dropout's random numbers) stops
the move: the selection is applied below it.

Dynamo's graph holds torch-level calls (``torch._C._nn.linear``, ``F.layer_norm``, tensor methods
such as ``view`` or ``float``), before AOTAutograd decomposes them, so the tables name those.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

_LINEAR = {torch._C._nn.linear, F.linear}
_LAYER_NORM = {F.layer_norm, torch.layer_norm}
_RMS_NORM = {F.rms_norm} if hasattr(F, "rms_norm") else set()
# Elementwise functions of one tensor (the activations transformer heads use).
_UNARY_FUNCTIONS = {
    torch._C._nn.gelu, F.gelu, F.relu, torch.relu, torch.tanh, torch.sigmoid, F.silu, F.mish, F.elu,
    F.leaky_relu, torch.nn.functional.hardtanh, torch.neg, torch.abs, torch.exp, torch.square,
}
_UNARY_METHODS = {"relu", "tanh", "sigmoid", "neg", "abs", "exp", "square", "float", "half", "bfloat16", "double"}
_BINARY_FUNCTIONS = {operator.add, operator.sub, operator.mul, operator.truediv, torch.add, torch.sub,
                     torch.mul, torch.div}
_BINARY_METHODS = {"add", "sub", "mul", "div"}
_LAYOUT_METHODS = {"view", "reshape", "contiguous", "flatten"}
_LAYOUT_FUNCTIONS = {torch.reshape, torch.flatten}


@dataclass(frozen=True)
class RowOp:
    """A node of the graph that is row-wise in ``primary`` (the node it reads rows from).
    ``layout``: it only regroups leading dimensions, so on selected (flattened) rows it is the
    identity and is not replayed."""

    node: torch.fx.Node
    primary: torch.fx.Node
    layout: bool


def example(node: Any) -> torch.Tensor | None:
    """Dynamo's fake value of a node (``example_value``), or None when it is not a tensor."""
    if not isinstance(node, torch.fx.Node):
        return None
    value = node.meta.get("example_value", node.meta.get("val"))
    return value if isinstance(value, torch.Tensor) else None


def _same_last_dim(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dim() >= 1 and b.dim() >= 1 and a.shape[-1] == b.shape[-1]


def _is_full_slice(s: Any) -> bool:
    return isinstance(s, slice) and s.start in (None, 0) and s.stop is None and s.step in (None, 1)


def _broadcast_over_rows(arg: Any) -> bool:
    """A Python number, or a tensor of at most one dimension (one value per column or a single value):
    the same for every row."""
    if isinstance(arg, (int, float, bool)):
        return True
    value = example(arg)
    return value is not None and value.dim() <= 1


def _only_dtypes(args: tuple, kwargs: dict) -> bool:
    """``x.to(dtype)``: a dtype change only (a device or a copy flag is not a row-wise op we replay)."""
    return all(isinstance(a, torch.dtype) for a in args) and set(kwargs) <= {"dtype"}


def classify(node: torch.fx.Node) -> RowOp | None:
    """The node as a RowOp, or None when it is not row-wise (module docstring) or its shapes are unknown."""
    out = example(node)
    if out is None or out.dim() < 2 or node.op not in ("call_function", "call_method"):
        return None
    target, args, kwargs = node.target, node.args, node.kwargs
    primary = args[0] if args else None
    inp = example(primary)
    if inp is None or inp.dim() < 2:
        return None
    if node.op == "call_method":
        if target in _LAYOUT_METHODS:
            return RowOp(node, primary, True) if _same_last_dim(inp, out) else None
        if target in _UNARY_METHODS and len(args) == 1 and not kwargs:
            return RowOp(node, primary, False) if inp.shape == out.shape else None
        if target == "to" and _only_dtypes(args[1:], kwargs):
            return RowOp(node, primary, False) if inp.shape == out.shape else None
        if target in _BINARY_METHODS:
            return _binary(node, args, kwargs, out)
        return None
    if target in _LAYOUT_FUNCTIONS:
        return RowOp(node, primary, True) if _same_last_dim(inp, out) else None
    if target is operator.getitem:
        index = args[1] if len(args) > 1 else None
        index = index if isinstance(index, tuple) else (index,)
        identity = all(i is Ellipsis or _is_full_slice(i) for i in index)
        return RowOp(node, primary, True) if identity and inp.shape == out.shape else None
    if target in _LINEAR:
        return RowOp(node, primary, False) if inp.shape[:-1] == out.shape[:-1] else None
    if target in _LAYER_NORM or target in _RMS_NORM:
        shape = args[1] if len(args) > 1 else kwargs.get("normalized_shape")
        if isinstance(shape, int):
            shape = (shape,)
        if isinstance(shape, (list, tuple)) and len(shape) == 1 and inp.shape == out.shape:
            return RowOp(node, primary, False)
        return None
    if target in _UNARY_FUNCTIONS:
        others = list(args[1:]) + list(kwargs.values())
        if any(isinstance(a, torch.fx.Node) for a in others) or inp.shape != out.shape:
            return None
        return RowOp(node, primary, False)
    if target in _BINARY_FUNCTIONS:
        return _binary(node, args, kwargs, out)
    return None


def _binary(node: torch.fx.Node, args: tuple, kwargs: dict, out: torch.Tensor) -> RowOp | None:
    """``a op b`` is row-wise in the operand shaped like the result when the other is the same for
    every row (a number, a bias of the last dimension)."""
    if len(args) != 2 or any(isinstance(v, torch.fx.Node) for v in kwargs.values()):
        return None
    a, b = args
    for primary, other in ((a, b), (b, a)):
        value = example(primary)
        if value is not None and value.shape == out.shape and _broadcast_over_rows(other):
            return RowOp(node, primary, False)
    return None


__all__ = ["RowOp", "classify", "example"]
