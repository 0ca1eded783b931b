"""SymInt arithmetic (dynamic shapes): sizes computed in the graph are int64 0-d values."""

from __future__ import annotations

import math
import operator

import torch

from .registry import converter


def _binary(op_type):
    def fn(ctx, node, a):
        x, y = a.args
        mv = node.meta.get("val")
        dt = torch.float64 if isinstance(mv, (float, torch.SymFloat)) else torch.int64
        r = ctx.op(op_type, ctx.as_val(x, dt), ctx.as_val(y, dt), dtype=dt)
        r.is_symint = True
        return r

    return fn


converter(operator.add)(_binary("Add"))
converter(operator.sub)(_binary("Sub"))
converter(operator.mul)(_binary("Mul"))
converter(operator.mod)(_binary("Mod"))
converter(operator.truediv)(_binary("Div"))
converter(torch.sym_max)(_binary("Max"))
converter(torch.sym_min)(_binary("Min"))


@converter(operator.floordiv)
def floordiv(ctx, node, a):
    x, y = a.args
    # Floor division of int64 values: Div truncates, so correct toward -inf for mixed signs.
    xv, yv = ctx.as_val(x, torch.float64), ctx.as_val(y, torch.float64)
    r = ctx.cast(ctx.op("Floor", ctx.op("Div", xv, yv)), torch.int64)
    r.is_symint = True
    return r


@converter(operator.neg)
def neg(ctx, node, a):
    (x,) = a.args
    return ctx.op("Neg", x)


@converter(torch.sym_float)
def sym_float(ctx, node, a):
    (x,) = a.args
    return ctx.as_val(x, torch.float64)


@converter(math.ceil, math.floor)
def ceil_floor(ctx, node, a):
    (x,) = a.args
    op = "Ceil" if node.target is math.ceil else "Floor"
    return ctx.cast(ctx.op(op, ctx.as_val(x, torch.float64)), torch.int64)

