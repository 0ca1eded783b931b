"""Opset lowering: converters write each op in its opset-18 form; this module rewrites the few ops
whose signature or meaning changed since opset 12 into the form the export opset defines.

One place holds every such difference, so a converter never branches on the opset for them:

| op | changed at | below that opset |
| --- | --- | --- |
| Squeeze, Unsqueeze, ReduceSum | 13 | axes is an attribute, not an input |
| Split | 13 | split is an attribute, not an input |
| Softmax, LogSoftmax | 13 | input coerced to 2-D at axis: the same as opset 13 only for the last axis |
| Shape | 15 | no start/end attributes (a Slice follows) |
| LayerNormalization | 17 | not in ai.onnx: onnxruntime's com.microsoft LayerNormalization (same contract) |

Ops that do not exist at all at the export opset (Trilu before 14, the Bitwise* ops before 18) are the
converters' business: they decline, and the node becomes an ATen node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._engine import MS_DOMAIN
from .errors import UnsupportedTorchModelError

if TYPE_CHECKING:
    from .context import ExportContext, Val

_AXES_INPUT_SINCE_13 = {"Squeeze": "axes", "Unsqueeze": "axes", "ReduceSum": "axes", "Split": "split"}


def lower(ctx: "ExportContext", op_type: str, inputs: tuple, attrs: dict[str, Any], domain: str,
          emit) -> Any | None:
    """Emits `op_type` in the export opset's form through `emit(op_type, *inputs, **attrs)` when it
    differs from the opset-18 form; returns None when the node needs no change."""
    if domain != "":
        return None
    opset = ctx.opset
    if opset < 13 and op_type in _AXES_INPUT_SINCE_13 and len(inputs) > 1 and inputs[1] is not None:
        values = ctx.constant_value(inputs[1])
        if values is None:
            raise UnsupportedTorchModelError(
                f"{op_type} with a computed '{_AXES_INPUT_SINCE_13[op_type]}' cannot be expressed at opset "
                f"{opset} (an attribute there); export at opset 13 or later")
        attrs = dict(attrs, **{_AXES_INPUT_SINCE_13[op_type]: [int(v) for v in values.reshape(-1)]})
        return emit(op_type, inputs[0], *inputs[2:], **attrs)
    if opset < 13 and op_type in ("Softmax", "LogSoftmax"):
        return _softmax_before_13(ctx, op_type, inputs[0], attrs, emit)
    if opset < 15 and op_type == "Shape" and (attrs.get("start") is not None or attrs.get("end") is not None):
        return _shape_slice(ctx, inputs[0], attrs, emit)
    if opset < 17 and op_type == "LayerNormalization":
        return emit(op_type, *inputs, domain=MS_DOMAIN, **attrs)
    return None


def _softmax_before_13(ctx: "ExportContext", op_type: str, x: "Val", attrs: dict, emit) -> Any:
    rank = x.rank
    axis = attrs.get("axis", -1)
    axis = axis + rank if axis < 0 else axis
    if rank == 0 or axis == rank - 1:
        # Coercing to [prod(dims before axis), dim(axis)] normalises along the last axis: the same.
        return emit(op_type, x, **dict(attrs, axis=max(rank - 1, 0)))
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    shape = None if x.shape is None else tuple(x.shape[p] for p in perm)
    moved = emit("Transpose", x, perm=perm, shape=shape)
    y = emit(op_type, moved, **dict(attrs, axis=rank - 1))
    y.shape = shape
    return emit("Transpose", y, perm=perm, shape=x.shape)


def _shape_slice(ctx: "ExportContext", x: "Val", attrs: dict, emit) -> Any:
    full = emit("Shape", x, dtype=torch.int64, shape=None if x.shape is None else (len(x.shape),))
    start = attrs.get("start") or 0
    end = attrs.get("end")
    ends = np.iinfo(np.int64).max if end is None else end
    return emit("Slice", full, ctx.const(np.asarray([start], np.int64), torch.int64),
                ctx.const(np.asarray([ends], np.int64), torch.int64), dtype=torch.int64)
