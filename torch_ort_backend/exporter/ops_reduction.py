"""Reductions (and CumSum, TopK). From opset 18 every Reduce* takes its axes as an input; before, only
ReduceSum does."""

from __future__ import annotations

import numpy as np
import torch

from .context import ExportContext, Val
from .ops_tensor import _norm_dim, out_meta
from .registry import converter

aten = torch.ops.aten


def reduce(ctx: ExportContext, op_type: str, x: Val, dims, keepdim: bool, dtype=None) -> Val:
    dims = [] if dims is None else ([dims] if isinstance(dims, int) else list(dims))
    if x.shape == ():
        return ctx.op("Identity", x) if dtype is None else ctx.cast(x, dtype)
    axes_as_input = op_type == "ReduceSum" or ctx.opset >= 18
    kw = {"keepdims": int(bool(keepdim))}
    if dtype is not None:
        x = ctx.cast(x, dtype)
    if not dims:
        return ctx.op(op_type, x, **kw)
    if axes_as_input:
        return ctx.op(op_type, x, ctx.const(np.asarray(dims, dtype=np.int64), torch.int64), **kw)
    return ctx.op(op_type, x, axes=dims, **kw)


@converter(aten.sum.dim_IntList)
def sum_dim(ctx, node, a):
    return reduce(ctx, "ReduceSum", a.self, a.dim, a.keepdim, node.meta["val"].dtype)


@converter(aten.sum.default)
def sum_all(ctx, node, a):
    return reduce(ctx, "ReduceSum", a.self, None, False, node.meta["val"].dtype)


@converter(aten.mean.dim)
def mean_dim(ctx, node, a):
    return reduce(ctx, "ReduceMean", a.self, a.dim, a.keepdim, node.meta["val"].dtype)


@converter(aten.mean.default)
def mean_all(ctx, node, a):
    return reduce(ctx, "ReduceMean", a.self, None, False, node.meta["val"].dtype)


def _ordered(ctx: ExportContext, x: Val) -> Val:
    """ONNX's max/min/arg-max reductions order numbers only: bools as uint8 (False < True); the
    exporter casts the values back to torch's dtype."""
    return ctx.cast(x, torch.uint8) if x.dtype == torch.bool else x


@converter(aten.amax.default)
def amax(ctx, node, a):
    return reduce(ctx, "ReduceMax", _ordered(ctx, a.self), a.dim, a.keepdim)


@converter(aten.amin.default)
def amin(ctx, node, a):
    return reduce(ctx, "ReduceMin", _ordered(ctx, a.self), a.dim, a.keepdim)


@converter(aten.prod.dim_int)
def prod_dim(ctx, node, a):
    return reduce(ctx, "ReduceProd", a.self, a.dim, a.keepdim, node.meta["val"].dtype)


@converter(aten.max.dim)
def max_dim(ctx, node, a):
    x = _ordered(ctx, a.self)
    values = reduce(ctx, "ReduceMax", x, a.dim, a.keepdim)
    idx = ctx.op("ArgMax", x, axis=a.dim, keepdims=int(bool(a.keepdim)), dtype=torch.int64)
    return values, idx


@converter(aten.min.dim)
def min_dim(ctx, node, a):
    x = _ordered(ctx, a.self)
    values = reduce(ctx, "ReduceMin", x, a.dim, a.keepdim)
    idx = ctx.op("ArgMin", x, axis=a.dim, keepdims=int(bool(a.keepdim)), dtype=torch.int64)
    return values, idx


@converter(aten.argmax.default, aten.argmin.default)
def argmax(ctx, node, a):
    op = "ArgMax" if node.target is aten.argmax.default else "ArgMin"
    x, dim = _ordered(ctx, a.self), a.dim
    if dim is None:
        x = ctx.op("Reshape", x, ctx.const(np.asarray([-1], np.int64), torch.int64))
        dim = 0
    return ctx.op(op, x, axis=dim, keepdims=int(bool(a.keepdim)), dtype=torch.int64)


@converter(aten.cumsum.default)
def cumsum(ctx, node, a):
    dt = out_meta(node).dtype
    return ctx.op("CumSum", ctx.cast(a.self, dt), ctx.scalar(_norm_dim(a.dim, a.self.rank), torch.int64))


@converter(aten.topk.default)
def topk(ctx, node, a):
    # TopK always returns sorted values; torch's sorted=False order is its own, so leave it to torch.
    if not a.sorted or not isinstance(a.k, int):
        return None
    x = a.self
    dim = _norm_dim(a.dim, x.rank)
    k = ctx.const(np.asarray([a.k], np.int64), torch.int64)
    values, indices = ctx.op("TopK", x, k, outputs=2, dtypes=[x.dtype, torch.int64], axis=dim,
                             largest=int(bool(a.largest)), sorted=1)
    return values, indices
