"""Elementwise ATen ops: arithmetic, comparisons, activations, casts."""

from __future__ import annotations

import onnx
import torch

from .context import MS_DOMAIN, ExportContext, Val
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


def _with_alpha(ctx, op_type: str, dt: torch.dtype, x, y, alpha):
    """add / sub / rsub: x (op) alpha * y, in the dtype torch computes."""
    if dt == torch.bool:
        # bool + bool is logical or (alpha can only be True); torch has no bool subtraction.
        return ctx.op("Or", ctx.as_val(x, dt), ctx.as_val(y, dt), dtype=dt) if op_type == "Add" else None
    if alpha not in (None, 1):
        y = binary(ctx, "Mul", y, alpha, dt) if isinstance(y, Val) else y * alpha
    return binary(ctx, op_type, x, y, dt)


@converter(aten.add.Tensor, aten.add.Scalar)
def add(ctx, node, a):
    return _with_alpha(ctx, "Add", out_dtype(node), a.self, a.other, a.alpha)


@converter(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, node, a):
    return _with_alpha(ctx, "Sub", out_dtype(node), a.self, a.other, a.alpha)


@converter(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(ctx, node, a):
    return _with_alpha(ctx, "Sub", out_dtype(node), a.other, a.self, a.alpha)


@converter(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, node, a):
    dt = out_dtype(node)
    if dt == torch.bool:
        return ctx.op("And", ctx.as_val(a.self, dt), ctx.as_val(a.other, dt), dtype=dt)  # bool * bool
    return binary(ctx, "Mul", a.self, a.other, dt)


# The engine's Pow has float, int32 and int64 kernels (the ONNX types); narrower integers wrap the
# same way when computed in int64 and cast back.
_POW_TYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64)


def _pow(ctx, base: Val, exponent: Val, dt: torch.dtype) -> Val:
    if dt in _POW_TYPES:
        return ctx.op("Pow", base, exponent)
    wide = torch.int64
    return ctx.cast(ctx.op("Pow", ctx.cast(base, wide), ctx.cast(exponent, wide)), dt)


@converter(aten.pow.Tensor_Scalar)
def pow_scalar(ctx, node, a):
    dt = out_dtype(node)
    e = a.exponent
    if dt == torch.bool:
        return None
    if e == 0:
        # x ** 0 is 1 everywhere, NaN and 0 included.
        return ctx.op("Expand", ctx.scalar(1, dt), ctx.op("Shape", a.self, dtype=torch.int64), dtype=dt)
    # 16-bit floats compute in float32 and round once, as torch's kernel does: products rounded to
    # float16 at each step would differ in the last bits. The exception is torch's own: its
    # vectorised bfloat16 cube rounds x*x before multiplying by x again.
    ct = torch.float32 if dt in (torch.float16, torch.bfloat16) and not (dt == torch.bfloat16 and e == 3) else dt
    x = ctx.cast(ctx.cast(a.self, dt), ct)
    if e == 1:
        return ctx.cast(x, dt)
    if isinstance(e, (int, float)) and float(e).is_integer() and 2 <= e <= 4:
        # Small integer powers as products: exact as torch's, and several times faster than a
        # general pow (GPT-2's tanh-GELU cubes its input).
        sq = ctx.op("Mul", x, x)
        return ctx.cast({2: sq, 3: ctx.op("Mul", sq, x), 4: ctx.op("Mul", sq, sq)}[int(e)], dt)
    if e == 0.5 and dt.is_floating_point:
        return ctx.cast(ctx.op("Sqrt", x), dt)
    if e == -1 and dt.is_floating_point:
        return ctx.cast(ctx.op("Reciprocal", x), dt)
    return ctx.cast(_pow(ctx, x, ctx.scalar(e, ct), ct), dt)


@converter(aten.pow.Tensor_Tensor)
def pow_tensor(ctx, node, a):
    dt = out_dtype(node)
    if dt == torch.bool:
        return None
    return _pow(ctx, ctx.as_val(a.self, dt), ctx.as_val(a.exponent, dt), dt)


@converter(aten.pow.Scalar)
def pow_scalar_base(ctx, node, a):
    dt = out_dtype(node)
    if dt == torch.bool:
        return None
    return _pow(ctx, ctx.scalar(a.self, dt), ctx.as_val(a.exponent, dt), dt)


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
}.items():
    _unary(_op, *_targets)

@converter(aten.neg.default)
def neg(ctx, node, a):
    dt = out_dtype(node)
    x = ctx.cast(a.self, dt)
    if dt == torch.bool:
        return None
    if _is_unsigned(dt):
        return ctx.op("Sub", ctx.scalar(0, dt), x)  # wraps, as torch's -x on uint8
    return ctx.op("Neg", x)


@converter(aten.abs.default)
def abs_(ctx, node, a):
    dt = out_dtype(node)
    x = ctx.cast(a.self, dt)
    return ctx.op("Identity", x) if _is_unsigned(dt) or dt == torch.bool else ctx.op("Abs", x)


@converter(aten.relu.default)
def relu(ctx, node, a):
    dt = out_dtype(node)
    x = ctx.cast(a.self, dt)
    if dt == torch.bool:
        return None
    return ctx.op("Identity", x) if _is_unsigned(dt) else ctx.op("Relu", x)


@converter(aten.sign.default, aten.sgn.default)
def sign(ctx, node, a):
    dt = out_dtype(node)
    x = ctx.cast(a.self, dt)
    if dt == torch.bool:
        return ctx.op("Identity", x)
    if not dt.is_floating_point:
        return ctx.op("Sign", x)
    # torch's sign(NaN) is 0; ONNX's Sign(NaN) is NaN. (16-bit floats in float32: exact, and Where
    # takes bfloat16 only from opset 16.)
    x = ctx.cast(x, torch.float32) if dt in (torch.float16, torch.bfloat16) else x
    s = ctx.op("Where", ctx.op("IsNaN", x, dtype=torch.bool), ctx.scalar(0, x.dtype), ctx.op("Sign", x))
    return ctx.cast(s, dt)


def _is_unsigned(dt: torch.dtype) -> bool:
    return dt in (torch.uint8, torch.uint16, torch.uint32, torch.uint64)


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
    dt = out_dtype(node)
    if dt == torch.bool:
        return binary(ctx, "Or", a.self, a.other, dt)
    return binary(ctx, "Max", a.self, a.other, dt)  # NaN propagates in both


@converter(aten.minimum.default)
def minimum(ctx, node, a):
    dt = out_dtype(node)
    if dt == torch.bool:
        return binary(ctx, "And", a.self, a.other, dt)
    return binary(ctx, "Min", a.self, a.other, dt)


def _compare(op_type: str, negate: bool, *targets):
    @converter(*targets)
    def fn(ctx, node, a):
        dt = compute_dtype(a.self, a.other)
        if dt == torch.bool and op_type != "Equal":
            dt = torch.uint8  # ONNX orders numbers only; False < True as 0 < 1
        r = ctx.op(op_type, ctx.as_val(a.self, dt), ctx.as_val(a.other, dt), dtype=torch.bool)
        return ctx.op("Not", r) if negate else r

    return fn


_compare("Equal", False, aten.eq.Tensor, aten.eq.Scalar)
_compare("Equal", True, aten.ne.Tensor, aten.ne.Scalar)
_compare("Less", False, aten.lt.Tensor, aten.lt.Scalar)
_compare("LessOrEqual", False, aten.le.Tensor, aten.le.Scalar)
_compare("Greater", False, aten.gt.Tensor, aten.gt.Scalar)
_compare("GreaterOrEqual", False, aten.ge.Tensor, aten.ge.Scalar)


def _all_false(ctx, x: Val) -> Val:
    return ctx.op("ConstantOfShape", ctx.op("Shape", x, dtype=torch.int64), dtype=torch.bool,
                  value=onnx.helper.make_tensor("value", onnx.TensorProto.BOOL, [1], [False]))


@converter(aten.isnan.default)
def isnan(ctx, node, a):
    if not a.self.dtype.is_floating_point:
        return _all_false(ctx, a.self)  # integers are never NaN
    return ctx.op("IsNaN", a.self, dtype=torch.bool)


@converter(aten.isinf.default)
def isinf(ctx, node, a):
    x = a.self
    if not x.dtype.is_floating_point:
        return _all_false(ctx, x)
    if x.dtype in (torch.float16, torch.bfloat16) and ctx.opset < 20:
        x = ctx.cast(x, torch.float32)  # IsInf takes 16-bit floats from opset 20; the cast is exact
    return ctx.op("IsInf", x, dtype=torch.bool)


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
