"""Division and rounding: true division, floor and trunc division, remainder, fmod, and the rounding
functions (floor, ceil, trunc, round with decimals).

Each follows torch's arithmetic, which is not ONNX's where they part:
- Floor division of floats is not Floor(a / b): torch takes the C fmod first and corrects the
  quotient of the exact difference, so 1 // 0.1 is 9 (not 10) and inf // x is NaN (not inf).
- remainder has the divisor's sign (fmod the dividend's); ONNX Mod on floats must be fmod=1, so the
  divisor-sign correction is written out.
- 16-bit floats compute in float32 and round once at the end, as torch's kernels do; the same ops
  in float16 would round every intermediate.
- Integer floor/trunc division, remainder and fmod stay ATen nodes: torch raises on a zero divisor,
  where ONNX (and the engine) would return 0.
"""

from __future__ import annotations

import torch

from .context import ExportContext, Val
from .registry import converter

aten = torch.ops.aten

_HALVES = (torch.float16, torch.bfloat16)


def _out_dtype(node) -> torch.dtype:
    return node.meta["val"].dtype


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The type torch's CPU kernels compute a float op in (its "opmath" type)."""
    return torch.float32 if dtype in _HALVES else dtype


def _operands(ctx: ExportContext, node, a, names=("self", "other")) -> tuple[torch.dtype, Val, Val] | None:
    dt = _out_dtype(node)
    if not dt.is_floating_point:
        return None
    ct = _compute_dtype(dt)
    x, y = (ctx.as_val(getattr(a, n), ct) for n in names)
    return dt, x, y


def _floor_divide(ctx: ExportContext, x: Val, y: Val) -> Val:
    """torch's div_floor_floating: the quotient of a - fmod(a, b), corrected toward -inf when the
    remainder's sign differs from the divisor's, then rounded to the nearest integer; a zero
    quotient keeps the sign of a / b, and b == 0 gives a / b (+-inf or NaN)."""
    dt = x.dtype
    zero, one, half = ctx.scalar(0, dt), ctx.scalar(1, dt), ctx.scalar(0.5, dt)
    mod = ctx.op("Mod", x, y, fmod=1)
    div = ctx.op("Div", ctx.op("Sub", x, mod), y)
    mod_nonzero = ctx.op("Not", ctx.op("Equal", mod, zero, dtype=torch.bool), dtype=torch.bool)
    signs_differ = ctx.op("Xor", ctx.op("Less", y, zero, dtype=torch.bool), ctx.op("Less", mod, zero, dtype=torch.bool),
                          dtype=torch.bool)
    div = ctx.op("Where", ctx.op("And", mod_nonzero, signs_differ, dtype=torch.bool), ctx.op("Sub", div, one), div)
    floor = ctx.op("Floor", div)
    floor = ctx.op("Where", ctx.op("Greater", ctx.op("Sub", div, floor), half, dtype=torch.bool),
                   ctx.op("Add", floor, one), floor)
    quotient = ctx.op("Div", x, y)
    floor = ctx.op("Where", ctx.op("Equal", div, zero, dtype=torch.bool), ctx.op("Mul", zero, quotient), floor)
    return ctx.op("Where", ctx.op("Equal", y, zero, dtype=torch.bool), quotient, floor)


def _trunc(ctx: ExportContext, x: Val) -> Val:
    # Ceil below zero keeps trunc(-0.5) == -0.0, and NaN falls through to Floor(NaN).
    below = ctx.op("Less", x, ctx.scalar(0, x.dtype), dtype=torch.bool)
    return ctx.op("Where", below, ctx.op("Ceil", x), ctx.op("Floor", x))


def _remainder(ctx: ExportContext, x: Val, y: Val) -> Val:
    """The divisor's sign: fmod, plus the divisor when a non-zero remainder has the other sign."""
    zero = ctx.scalar(0, x.dtype)
    mod = ctx.op("Mod", x, y, fmod=1)
    mod_nonzero = ctx.op("Not", ctx.op("Equal", mod, zero, dtype=torch.bool), dtype=torch.bool)
    signs_differ = ctx.op("Xor", ctx.op("Less", y, zero, dtype=torch.bool), ctx.op("Less", mod, zero, dtype=torch.bool),
                          dtype=torch.bool)
    return ctx.op("Where", ctx.op("And", mod_nonzero, signs_differ, dtype=torch.bool), ctx.op("Add", mod, y), mod)


@converter(aten.div.Tensor, aten.div.Scalar)
def div(ctx, node, a):
    ops = _operands(ctx, node, a)
    if ops is None:
        return None
    dt, x, y = ops
    return ctx.cast(ctx.op("Div", x, y), dt)


@converter(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(ctx, node, a):
    ops = _operands(ctx, node, a)
    if ops is None:
        return None
    dt, x, y = ops
    if a.rounding_mode is None:
        return ctx.cast(ctx.op("Div", x, y), dt)
    if a.rounding_mode == "floor":
        return ctx.cast(_floor_divide(ctx, x, y), dt)
    return ctx.cast(_trunc(ctx, ctx.op("Div", x, y)), dt)


@converter(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(ctx, node, a):
    ops = _operands(ctx, node, a)
    if ops is None:
        return None
    dt, x, y = ops
    return ctx.cast(_floor_divide(ctx, x, y), dt)


@converter(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(ctx, node, a):
    ops = _operands(ctx, node, a)
    if ops is None:
        return None
    dt, x, y = ops
    return ctx.cast(_remainder(ctx, x, y), dt)


@converter(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(ctx, node, a):
    ops = _operands(ctx, node, a)
    if ops is None:
        return None
    dt, x, y = ops
    return ctx.cast(ctx.op("Mod", x, y, fmod=1), dt)


# ---- rounding functions: integers are already whole, so each is the identity on them ----

def _rounding(op_type: str | None, *targets):
    @converter(*targets)
    def fn(ctx, node, a):
        dt = _out_dtype(node)
        x = ctx.cast(a.self, dt)
        if not dt.is_floating_point:
            return ctx.op("Identity", x)
        # 16-bit values are exact in float32, and so are their rounded values; float32 also spares
        # the opsets whose Round (before 22) or Where (before 16) lack bfloat16.
        x = ctx.cast(x, _compute_dtype(dt))
        return ctx.cast(_trunc(ctx, x) if op_type is None else ctx.op(op_type, x), dt)

    return fn


_rounding("Floor", aten.floor.default)
_rounding("Ceil", aten.ceil.default)
_rounding("Round", aten.round.default)  # half to even in both
_rounding(None, aten.trunc.default, aten.fix.default)


@converter(aten.round.decimals)
def round_decimals(ctx, node, a):
    """torch: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for negative d, in the
    compute type."""
    dt = _out_dtype(node)
    if not dt.is_floating_point:
        return None
    ct = _compute_dtype(dt)
    x = ctx.cast(a.self, ct)
    d = int(a.decimals)
    scale = ctx.scalar(10.0 ** abs(d), ct)
    if d >= 0:
        r = ctx.op("Div", ctx.op("Round", ctx.op("Mul", x, scale)), scale)
    else:
        r = ctx.op("Mul", ctx.op("Round", ctx.op("Div", x, scale)), scale)
    return ctx.cast(r, dt)
