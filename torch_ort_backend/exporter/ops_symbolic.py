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



def _compare(op_type, swap=False, negate=False):
    def fn(ctx, node, a):
        x, y = a.args
        dt = torch.float64 if any(isinstance(v, (float, torch.SymFloat)) or getattr(v, "dtype", None) == torch.float64
                                  for v in (x, y)) else torch.int64
        xv, yv = ctx.as_val(x, dt), ctx.as_val(y, dt)
        r = ctx.op(op_type, *((yv, xv) if swap else (xv, yv)), dtype=torch.bool)
        r = ctx.op("Not", r, dtype=torch.bool) if negate else r
        r.shape, r.is_symint = (), True
        return r

    return fn


# SymBool comparisons (draft_export and guards leave them in graphs as inputs of sym_ite).
converter(operator.eq)(_compare("Equal"))
converter(operator.ne)(_compare("Equal", negate=True))
converter(operator.lt)(_compare("Less"))
converter(operator.gt)(_compare("Greater"))
converter(operator.le)(_compare("Greater", negate=True))
converter(operator.ge)(_compare("Less", negate=True))


@converter(torch.sym_ite)
def sym_ite(ctx, node, a):
    """torch.sym_ite(cond, a, b): a SymInt/SymFloat chosen by a SymBool at run time."""
    cond, x, y = a.args
    mv = node.meta.get("val")
    dt = torch.float64 if isinstance(mv, (float, torch.SymFloat)) else torch.int64
    if isinstance(cond, bool):
        return ctx.as_val(x if cond else y, dt)
    r = ctx.op("Where", ctx.as_val(cond, torch.bool), ctx.as_val(x, dt), ctx.as_val(y, dt), dtype=dt)
    r.shape, r.is_symint = (), True
    return r


@converter(torch.ops.aten._assert_scalar.default, torch.ops.aten._assert_tensor_metadata.default,
           torch.ops.aten.sym_constrain_range.default, torch.ops.aten.sym_constrain_range_for_size.default)
def runtime_assert(ctx, node, a):
    """torch's runtime checks of what tracing assumed (a size >= 0, a dtype, the range of a
    data-dependent size such as nonzero's count): nothing reads their result, and the engine's shape
    functions check shapes on every run, so they emit no node."""
    return ()
