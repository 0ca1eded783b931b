"""Generator ops (tensors made from attributes and sizes): full/zeros/ones and their *_like forms
(ConstantOfShape), scalar_tensor, arange (Range), triu/tril (Trilu)."""

from __future__ import annotations

import numpy as np
import torch

from .context import Val, onnx_dtype
from .ops_tensor import out_meta
from .registry import converter

aten = torch.ops.aten


def _fill(ctx, node, value) -> Val:
    mv = out_meta(node)
    dt = mv.dtype
    static = all(isinstance(s, int) for s in mv.shape)
    if static and int(np.prod(mv.shape)) <= 16:
        return ctx.const(np.full([int(s) for s in mv.shape], value), dt)
    shape = ctx.ints([s if isinstance(s, int) else None for s in mv.shape]) if static else None
    if shape is None:
        return None
    from onnx import helper

    tensor = helper.make_tensor("value", onnx_dtype(dt), [1], [value] if dt != torch.bool else [bool(value)])
    return ctx.op("ConstantOfShape", shape, value=tensor, dtype=dt)


def _symbolic_fill(ctx, node, size, value):
    dt = out_meta(node).dtype
    from onnx import helper

    tensor = helper.make_tensor("value", onnx_dtype(dt), [1], [value] if dt != torch.bool else [bool(value)])
    return ctx.op("ConstantOfShape", ctx.ints(list(size)), value=tensor, dtype=dt)


def _fill_value(v):
    return v if not isinstance(v, Val) else None


@converter(aten.full.default, aten.new_full.default)
def full(ctx, node, a):
    if isinstance(a.fill_value, Val):
        return None
    return _fill(ctx, node, a.fill_value) or _symbolic_fill(ctx, node, a.size, a.fill_value)


@converter(aten.zeros.default, aten.new_zeros.default, aten.empty.memory_format, aten.new_empty.default)
def zeros(ctx, node, a):
    return _fill(ctx, node, 0) or _symbolic_fill(ctx, node, a.size, 0)


@converter(aten.ones.default, aten.new_ones.default)
def ones(ctx, node, a):
    return _fill(ctx, node, 1) or _symbolic_fill(ctx, node, a.size, 1)


def _like(ctx, node, x: Val, value):
    r = _fill(ctx, node, value)
    if r is not None:
        return r
    dt = out_meta(node).dtype
    from onnx import helper

    tensor = helper.make_tensor("value", onnx_dtype(dt), [1], [value] if dt != torch.bool else [bool(value)])
    return ctx.op("ConstantOfShape", ctx.op("Shape", x, dtype=torch.int64), value=tensor, dtype=dt)


@converter(aten.zeros_like.default, aten.empty_like.default)
def zeros_like(ctx, node, a):
    return _like(ctx, node, a.self, 0)


@converter(aten.ones_like.default)
def ones_like(ctx, node, a):
    return _like(ctx, node, a.self, 1)


@converter(aten.full_like.default)
def full_like(ctx, node, a):
    if isinstance(a.fill_value, Val):
        return None
    return _like(ctx, node, a.self, a.fill_value)


@converter(aten.scalar_tensor.default)
def scalar_tensor(ctx, node, a):
    if isinstance(a.s, Val):
        return ctx.cast(a.s, out_meta(node).dtype)
    return ctx.scalar(a.s, out_meta(node).dtype)


@converter(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(ctx, node, a):
    dt = out_meta(node).dtype
    start = getattr(a, "start", 0)
    step = getattr(a, "step", 1)
    return ctx.op("Range", ctx.as_val(start, dt), ctx.as_val(a.end, dt), ctx.as_val(step, dt), dtype=dt)


@converter(aten.triu.default, aten.tril.default)
def trilu(ctx, node, a):
    upper = 1 if node.target is aten.triu.default else 0
    if ctx.opset < 14:
        return None  # Trilu is opset 14: an ATen node below that
    return ctx.op("Trilu", a.self, ctx.scalar(a.diagonal, torch.int64), upper=upper)
