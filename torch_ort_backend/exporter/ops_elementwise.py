"""Elementwise ATen ops: arithmetic, comparisons, activations, casts."""

from __future__ import annotations

import torch

from .context import MS_DOMAIN, ExportContext, Val, onnx_dtype
from .registry import converter

aten = torch.ops.aten


def out_dtype(node) -> torch.dtype:
    return node.meta["val"].dtype


def compute_dtype(*xs) -> torch.dtype:
    """The dtype torch computes a comparison in (ignoring Python scalars unless they promote)."""
    vals = [x for x in xs if isinstance(x, Val)]
    dt = vals[0].dtype
    for v in vals[1:]:
        dt = torch.promote_types(dt, v.dtype)
    for x in xs:
        if isinstance(x, float) and not dt.is_floating_point:
            dt = torch.get_default_dtype()
    return dt


def binary(ctx: ExportContext, op_type: str, x, y, dtype: torch.dtype) -> Val:
    return ctx.op(op_type, ctx.as_val(x, dtype), ctx.as_val(y, dtype), dtype=dtype)


def _with_alpha(ctx, op_type: str, node, a):
    """add / sub: self (op) alpha * other, in the dtype torch computes."""
    dt = out_dtype(node)
    other = a.other
    if a.alpha not in (None, 1):
        other = binary(ctx, "Mul", other, a.alpha, dt) if isinstance(other, Val) else other * a.alpha
    return binary(ctx, op_type, a.self, other, dt)


@converter(aten.add.Tensor, aten.add.Scalar)
def add(ctx, node, a):
    return _with_alpha(ctx, "Add", node, a)


@converter(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, node, a):
    return _with_alpha(ctx, "Sub", node, a)


@converter(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(ctx, node, a):
    dt = out_dtype(node)
    other = a.other
    if a.alpha not in (None, 1):
        return None
    return binary(ctx, "Sub", other, a.self, dt)


@converter(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, node, a):
    return binary(ctx, "Mul", a.self, a.other, out_dtype(node))


@converter(aten.div.Tensor, aten.div.Scalar)
def div(ctx, node, a):
    dt = out_dtype(node)
    if not dt.is_floating_point:
        return None
    return binary(ctx, "Div", a.self, a.other, dt)


@converter(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(ctx, node, a):
    dt = out_dtype(node)
    if not dt.is_floating_point:
        return None
    q = binary(ctx, "Div", a.self, a.other, dt)
    if a.rounding_mode is None:
        return q
    if a.rounding_mode == "floor":
        return ctx.op("Floor", q)
    return ctx.op("Mul", ctx.op("Sign", q), ctx.op("Floor", ctx.op("Abs", q)))  # trunc


@converter(aten.pow.Tensor_Scalar)
def pow_scalar(ctx, node, a):
    dt = out_dtype(node)
    x = ctx.cast(a.self, dt)
    e = a.exponent
    if e == 1:
        return x
    if isinstance(e, (int, float)) and float(e).is_integer() and 2 <= e <= 4:
        # Small integer powers as products: exact as torch's, and several times faster than a
        # general pow (GPT-2's tanh-GELU cubes its input).
        sq = ctx.op("Mul", x, x)
        return {2: sq, 3: ctx.op("Mul", sq, x), 4: ctx.op("Mul", sq, sq)}[int(e)]
    if a.exponent == 0.5 and dt.is_floating_point:
        return ctx.op("Sqrt", x)
    if a.exponent == -1 and dt.is_floating_point:
        return ctx.op("Reciprocal", x)
    return ctx.op("Pow", x, ctx.scalar(a.exponent, dt))


@converter(aten.pow.Tensor_Tensor)
def pow_tensor(ctx, node, a):
    dt = out_dtype(node)
    return ctx.op("Pow", ctx.as_val(a.self, dt), ctx.as_val(a.exponent, dt))


@converter(aten.pow.Scalar)
def pow_scalar_base(ctx, node, a):
    dt = out_dtype(node)
    return ctx.op("Pow", ctx.scalar(a.self, dt), ctx.as_val(a.exponent, dt))


def _unary(op_type: str, *targets, float_only: bool = True):
    @converter(*targets)
    def fn(ctx, node, a):
        dt = out_dtype(node)
        if float_only and not dt.is_floating_point:
            return None
        return ctx.op(op_type, ctx.cast(a.self, dt))

    return fn


for _op, _targets in {
    "Exp": [aten.exp.default], "Log": [aten.log.default], "Sqrt": [aten.sqrt.default],
    "Reciprocal": [aten.reciprocal.default], "Sin": [aten.sin.default], "Cos": [aten.cos.default],
    "Tanh": [aten.tanh.default], "Sigmoid": [aten.sigmoid.default], "Erf": [aten.erf.default],
    "Floor": [aten.floor.default], "Ceil": [aten.ceil.default], "Round": [aten.round.default],
}.items():
    _unary(_op, *_targets)

for _op, _targets in {
    "Neg": [aten.neg.default], "Abs": [aten.abs.default], "Relu": [aten.relu.default],
    "Sign": [aten.sign.default, aten.sgn.default],
}.items():
    _unary(_op, *_targets, float_only=False)


@converter(aten.rsqrt.default)
def rsqrt(ctx, node, a):
    return ctx.op("Reciprocal", ctx.op("Sqrt", ctx.cast(a.self, out_dtype(node))))


@converter(aten.log1p.default)
def log1p(ctx, node, a):
    dt = out_dtype(node)
    return ctx.op("Log", ctx.op("Add", ctx.cast(a.self, dt), ctx.scalar(1, dt)))


@converter(aten.expm1.default)
def expm1(ctx, node, a):
    dt = out_dtype(node)
    return ctx.op("Sub", ctx.op("Exp", ctx.cast(a.self, dt)), ctx.scalar(1, dt))


@converter(aten.silu.default)
def silu(ctx, node, a):
    return ctx.op("Mul", a.self, ctx.op("Sigmoid", a.self))


@converter(aten.gelu.default)
def gelu(ctx, node, a):
    # One fused node (contrib Gelu / FastGelu): the engine's kernels are vectorised.
    op = "FastGelu" if a.approximate == "tanh" else "Gelu"
    return ctx.op(op, a.self, domain=MS_DOMAIN)


@converter(aten.leaky_relu.default)
def leaky_relu(ctx, node, a):
    return ctx.op("LeakyRelu", a.self, alpha=float(a.negative_slope))


@converter(aten.hardtanh.default)
def hardtanh(ctx, node, a):
    dt = a.self.dtype
    return ctx.op("Clip", a.self, ctx.scalar(a.min_val, dt), ctx.scalar(a.max_val, dt))


@converter(aten.softplus.default)
def softplus(ctx, node, a):
    if a.beta != 1 or a.threshold < 20:
        return None
    return ctx.op("Softplus", a.self)


@converter(aten.clamp.default, aten.clamp.Tensor)
def clamp(ctx, node, a):
    dt = out_dtype(node)
    lo = None if a.min is None else ctx.as_val(a.min, dt)
    hi = None if a.max is None else ctx.as_val(a.max, dt)
    x = ctx.cast(a.self, dt)
    if (lo is not None and lo.shape not in ((), None)) or (hi is not None and hi.shape not in ((), None)):
        if lo is not None:
            x = ctx.op("Max", x, lo)
        if hi is not None:
            x = ctx.op("Min", x, hi)
        return x
    return ctx.op("Clip", x, lo, hi)


@converter(aten.clamp_min.default)
def clamp_min(ctx, node, a):
    dt = out_dtype(node)
    return ctx.op("Max", ctx.cast(a.self, dt), ctx.as_val(a.min, dt))


@converter(aten.clamp_max.default)
def clamp_max(ctx, node, a):
    dt = out_dtype(node)
    return ctx.op("Min", ctx.cast(a.self, dt), ctx.as_val(a.max, dt))


@converter(aten.maximum.default)
def maximum(ctx, node, a):
    return binary(ctx, "Max", a.self, a.other, out_dtype(node))


@converter(aten.minimum.default)
def minimum(ctx, node, a):
    return binary(ctx, "Min", a.self, a.other, out_dtype(node))


def _compare(op_type: str, negate: bool, *targets):
    @converter(*targets)
    def fn(ctx, node, a):
        dt = compute_dtype(a.self, a.other)
        r = ctx.op(op_type, ctx.as_val(a.self, dt), ctx.as_val(a.other, dt), dtype=torch.bool)
        return ctx.op("Not", r) if negate else r

    return fn


_compare("Equal", False, aten.eq.Tensor, aten.eq.Scalar)
_compare("Equal", True, aten.ne.Tensor, aten.ne.Scalar)
_compare("Less", False, aten.lt.Tensor, aten.lt.Scalar)
_compare("LessOrEqual", False, aten.le.Tensor, aten.le.Scalar)
_compare("Greater", False, aten.gt.Tensor, aten.gt.Scalar)
_compare("GreaterOrEqual", False, aten.ge.Tensor, aten.ge.Scalar)


def _logical(op_type: str, *targets):
    @converter(*targets)
    def fn(ctx, node, a):
        if isinstance(a.other, Val) and a.self.dtype == torch.bool and a.other.dtype == torch.bool:
            return ctx.op(op_type, a.self, a.other, dtype=torch.bool)
        if "logical" in str(targets[0]):
            x = ctx.op("Cast", a.self, to=onnx_dtype(torch.bool), dtype=torch.bool)
            y = ctx.op("Cast", ctx.as_val(a.other, a.self.dtype), to=onnx_dtype(torch.bool), dtype=torch.bool)
            return ctx.op(op_type, x, y, dtype=torch.bool)
        return None

    return fn


_logical("And", aten.logical_and.default, aten.bitwise_and.Tensor)
_logical("Or", aten.logical_or.default, aten.bitwise_or.Tensor)
_logical("Xor", aten.logical_xor.default, aten.bitwise_xor.Tensor)


@converter(aten.logical_not.default, aten.bitwise_not.default)
def logical_not(ctx, node, a):
    x = a.self
    if x.dtype != torch.bool:
        if "bitwise" in str(node.target):
            return None
        x = ctx.cast(x, torch.bool)
    return ctx.op("Not", x, dtype=torch.bool)


@converter(aten.isnan.default)
def isnan(ctx, node, a):
    return ctx.op("IsNaN", a.self, dtype=torch.bool)


@converter(aten.isinf.default)
def isinf(ctx, node, a):
    return ctx.op("IsInf", a.self, dtype=torch.bool)


@converter(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ctx, node, a):
    dt = out_dtype(node)
    return ctx.op("Where", ctx.cast(a.condition, torch.bool), ctx.as_val(a.self, dt), ctx.as_val(a.other, dt),
                  dtype=dt)


@converter(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx, node, a):
    dt = out_dtype(node)
    return ctx.op("Where", ctx.cast(a.mask, torch.bool), ctx.as_val(a.value, dt), ctx.cast(a.self, dt), dtype=dt)


@converter(aten._to_copy.default)
def to_copy(ctx, node, a):
    if a.device is not None and torch.device(a.device).type != "cpu":
        return None
    dt = out_dtype(node)
    return ctx.cast(a.self, dt) if a.self.dtype != dt else ctx.op("Identity", a.self)


@converter(aten.lerp.Scalar)
def lerp(ctx, node, a):
    dt = out_dtype(node)
    diff = ctx.op("Sub", a.end, a.self)
    return ctx.op("Add", a.self, ctx.op("Mul", diff, ctx.scalar(a.weight, dt)))
