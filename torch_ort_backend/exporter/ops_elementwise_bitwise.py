"""Bitwise ATen ops (and, or, xor, not, left and right shifts) and the logical ops that share their
ONNX names.

ONNX's And/Or/Xor/Not are logical: defined on bool only. An integer bitwise op maps to opset 18's
BitwiseAnd/Or/Xor/Not; below opset 18 it stays an ATen node (torch's kernel) rather than becoming a
logical op that would turn every non-zero integer into 1.

Shifts follow torch, whose semantics differ by signedness:
- left: the two's-complement bits shifted, wrapping; a shift by the width or more, or by a negative
  amount, gives 0.
- right: arithmetic (sign-filling) on signed types, logical on unsigned; a shift by the width or
  more, or by a negative amount, gives 0 or -1 (the sign) on signed types and 0 on unsigned.
ONNX's BitShift (opset 11) is defined on unsigned types and gives 0 for a shift by the width or more
(numpy's result, which the ONNX reference computes). A signed left shift is therefore a BitShift of
the same bits as the unsigned type of its width (negative amounts wrap to huge ones, so they give 0
as in torch); a signed right shift complements negative values first and after (~(~x >>> s) is the
arithmetic shift), which needs BitwiseXor: opset 18, else an ATen node.
"""

from __future__ import annotations

import torch

from .context import ExportContext, Val, wrap_integer
from .registry import converter

aten = torch.ops.aten

BITWISE_OPSET = 18  # BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot

_UNSIGNED_OF = {torch.int8: torch.uint8, torch.int16: torch.uint16, torch.int32: torch.uint32,
                torch.int64: torch.uint64}


def _out_dtype(node) -> torch.dtype:
    return node.meta["val"].dtype


def _is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _operand(ctx: ExportContext, x, dtype: torch.dtype) -> Val:
    """A tensor Val cast to dtype (integer casts wrap), or a Python scalar as a 0-d constant of dtype."""
    if isinstance(x, Val):
        return ctx.cast(x, dtype)
    if _is_integer(dtype):
        return ctx.scalar(wrap_integer(x, dtype), dtype)
    return ctx.scalar(x, dtype)


def _binary(logical: str, bitwise: str, *targets):
    @converter(*targets)
    def fn(ctx, node, a):
        dt = _out_dtype(node)
        x, y = _operand(ctx, a.self, dt), _operand(ctx, a.other, dt)
        if dt == torch.bool:
            return ctx.op(logical, x, y, dtype=torch.bool)
        if not _is_integer(dt) or ctx.opset < BITWISE_OPSET:
            return None
        return ctx.op(bitwise, x, y, dtype=dt)

    return fn


_binary("And", "BitwiseAnd", aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_and.Scalar_Tensor,
        aten.__and__.Tensor, aten.__and__.Scalar)
_binary("Or", "BitwiseOr", aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.bitwise_or.Scalar_Tensor,
        aten.__or__.Tensor, aten.__or__.Scalar)
_binary("Xor", "BitwiseXor", aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, aten.bitwise_xor.Scalar_Tensor,
        aten.__xor__.Tensor, aten.__xor__.Scalar)


@converter(aten.bitwise_not.default)
def bitwise_not(ctx, node, a):
    dt = _out_dtype(node)
    if dt == torch.bool:
        return ctx.op("Not", a.self, dtype=torch.bool)
    if not _is_integer(dt) or ctx.opset < BITWISE_OPSET:
        return None
    return ctx.op("BitwiseNot", a.self, dtype=dt)


def _shift(ctx: ExportContext, x: Val, s: Val, dt: torch.dtype, left: bool) -> Val | None:
    direction = "LEFT" if left else "RIGHT"
    if not dt.is_signed:
        return ctx.op("BitShift", x, s, direction=direction, dtype=dt)
    u = _UNSIGNED_OF[dt]
    xu, su = ctx.cast(x, u), ctx.cast(s, u)
    if left:
        return ctx.cast(ctx.op("BitShift", xu, su, direction=direction, dtype=u), dt)
    if ctx.opset < BITWISE_OPSET:
        return None
    ones = ctx.scalar(wrap_integer(-1, u), u)
    sign = ctx.op("Where", ctx.op("Less", x, ctx.scalar(0, dt), dtype=torch.bool), ones, ctx.scalar(0, u), dtype=u)
    shifted = ctx.op("BitShift", ctx.op("BitwiseXor", xu, sign, dtype=u), su, direction=direction, dtype=u)
    return ctx.cast(ctx.op("BitwiseXor", shifted, sign, dtype=u), dt)


def _shift_targets(name: str, dunder: str) -> list:
    return [getattr(aten, name).Tensor, getattr(aten, name).Tensor_Scalar, getattr(aten, name).Scalar_Tensor,
            getattr(aten, dunder).Tensor, getattr(aten, dunder).Scalar]


@converter(*_shift_targets("bitwise_left_shift", "__lshift__"))
def left_shift(ctx, node, a):
    dt = _out_dtype(node)
    if not _is_integer(dt):
        return None
    return _shift(ctx, _operand(ctx, a.self, dt), _operand(ctx, a.other, dt), dt, left=True)


@converter(*_shift_targets("bitwise_right_shift", "__rshift__"))
def right_shift(ctx, node, a):
    dt = _out_dtype(node)
    if not _is_integer(dt):
        return None
    return _shift(ctx, _operand(ctx, a.self, dt), _operand(ctx, a.other, dt), dt, left=False)


# ---- logical ops: bool results from any dtype (non-zero is true, NaN included) ----

def _as_bool(ctx: ExportContext, x) -> Val:
    if isinstance(x, Val):
        return ctx.cast(x, torch.bool)
    return ctx.scalar(bool(x), torch.bool)


def _logical(op_type: str, *targets):
    @converter(*targets)
    def fn(ctx, node, a):
        return ctx.op(op_type, _as_bool(ctx, a.self), _as_bool(ctx, a.other),
                      dtype=torch.bool)

    return fn


_logical("And", aten.logical_and.default)
_logical("Or", aten.logical_or.default)
_logical("Xor", aten.logical_xor.default)


@converter(aten.logical_not.default)
def logical_not(ctx, node, a):
    return ctx.op("Not", _as_bool(ctx, a.self), dtype=torch.bool)
