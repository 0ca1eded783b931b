"""Neural-network ops: matmul family, convolution, normalisation, softmax, embedding, losses, pooling."""

from __future__ import annotations

import numpy as np
import torch

from .context import MS_DOMAIN, Val
from .engine_ops import engine_has
from .registry import converter

aten = torch.ops.aten

_REDUCTION = {0: "none", 1: "mean", 2: "sum"}


def _transposed_source(fx_arg):
    """If an FX argument is aten.t / a 2-D permute([1, 0]) of some value, that value (for transB/transA)."""
    import torch.fx

    if not isinstance(fx_arg, torch.fx.Node) or fx_arg.op != "call_function":
        return None
    if fx_arg.target is aten.t.default or (
        fx_arg.target is aten.permute.default and list(fx_arg.args[1]) in ([1, 0], [-1, -2], [1, -2], [-1, 0])
    ) or (fx_arg.target is aten.transpose.int and sorted(a % 2 for a in fx_arg.args[1:3]) == [0, 1]):
        src = fx_arg.args[0]
        mv = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
        if mv is not None and mv.dim() == 2:
            return src
    return None


def _gemm_operand(ctx, node, index: int):
    """(value, 1) when the node's argument `index` is a 2-D transpose of an exported value: Gemm
    reads the untransposed value with transB=1 and the Transpose node dies in the engine's DCE."""
    src = _transposed_source(node.args[index])
    if src is not None and src in ctx.env:
        return ctx.env[src], 1
    return None, 0


def _gemm_takes(ctx, dtype: torch.dtype) -> bool:
    """Whether Gemm takes this dtype at the model's opset (bfloat16 joined its types at opset 13)."""
    return dtype in (torch.float32, torch.float16) or (dtype == torch.bfloat16 and ctx.opset >= 13)


@converter(aten.mm.default)
def mm(ctx, node, a):
    # Transposed operands become Gemm's flags (no Transpose node): a Linear's backward multiplies by
    # its weight and its input transposed. The engine's MatMulTransposeFusion does the same for
    # float32/float64 graphs only, and autocast's are bfloat16.
    a_src, trans_a = _gemm_operand(ctx, node, 0)
    b_src, trans_b = _gemm_operand(ctx, node, 1)
    if (trans_a or trans_b) and _gemm_takes(ctx, a.self.dtype):
        return ctx.op("Gemm", a_src if trans_a else a.self, b_src if trans_b else a.mat2,
                      transA=trans_a or None, transB=trans_b or None)
    return ctx.op("MatMul", a.self, a.mat2)


@converter(aten.bmm.default)
def bmm(ctx, node, a):
    return ctx.op("MatMul", a.self, a.mat2)


@converter(aten.addmm.default)
def addmm(ctx, node, a):
    b, trans_b = _gemm_operand(ctx, node, 2)
    if not trans_b:
        b = a.mat2
    kw = {}
    if a.alpha != 1:
        kw["alpha"] = float(a.alpha)
    if a.beta != 1:
        kw["beta"] = float(a.beta)
    return ctx.op("Gemm", a.mat1, b, a.self, transB=trans_b or None, **kw)


def _pairs(v, n):
    v = list(v)
    return v * n if len(v) == 1 else v


@converter(aten.convolution.default)
def convolution(ctx, node, a):
    nd = a.weight.rank - 2
    if any(not isinstance(p, int) for p in a.padding):
        return None
    strides, pads, dil = _pairs(a.stride, nd), _pairs(a.padding, nd), _pairs(a.dilation, nd)
    kshape = [int(s) for s in a.weight.shape[2:]] if a.weight.static_shape() else None
    if a.transposed:
        outpad = _pairs(a.output_padding, nd)
        return ctx.op("ConvTranspose", a.input, a.weight, a.bias, strides=strides, pads=pads + pads,
                      dilations=dil, group=a.groups, output_padding=outpad if any(outpad) else None,
                      kernel_shape=kshape)
    return ctx.op("Conv", a.input, a.weight, a.bias, strides=strides, pads=pads + pads, dilations=dil,
                  group=a.groups, kernel_shape=kshape)


@converter(aten.native_layer_norm.default)
def layer_norm(ctx, node, a):
    x = a.input
    k = len(a.normalized_shape)
    axis = x.rank - k
    scale, bias = a.weight, a.bias
    if scale is None:
        if not all(isinstance(s, int) for s in a.normalized_shape):
            return None
        scale = ctx.const(np.ones(list(a.normalized_shape)), x.dtype)
    y, mean, rstd = ctx.op("LayerNormalization", x, scale, bias, outputs=3, axis=axis, epsilon=float(a.eps),
                           dtypes=[x.dtype, torch.float32, torch.float32])
    return y, mean, rstd


@converter(aten._softmax.default)
def softmax(ctx, node, a):
    if a.half_to_float:
        return None
    return ctx.op("Softmax", a.self, axis=a.dim)


@converter(aten._log_softmax.default)
def log_softmax(ctx, node, a):
    if a.half_to_float:
        return None
    return ctx.op("LogSoftmax", a.self, axis=a.dim)


@converter(aten.embedding.default)
def embedding(ctx, node, a):
    return ctx.op("Gather", a.weight, a.indices, axis=0)


# The ignore_index attribute used when the index itself is a graph value: no class index is negative,
# and a target torch would reject as out of range is practically never this one.
_SYMBOLIC_IGNORE_SENTINEL = -(2 ** 63)


def ignored_target(ctx, target: Val, ignore_index) -> tuple[Val, int]:
    """(target, ignore_index attribute) for the NegativeLogLikelihoodLoss ops. ONNX takes the index
    as an attribute, but dynamo makes an int argument that keeps changing a SymInt (a graph value):
    then the targets equal to it are mapped to a fixed sentinel and the sentinel is the attribute."""
    if not isinstance(ignore_index, Val):
        return target, int(ignore_index)
    ignored = ctx.op("Equal", target, ctx.cast(ignore_index, target.dtype), dtype=torch.bool)
    sentinel = ctx.scalar(_SYMBOLIC_IGNORE_SENTINEL, target.dtype)
    return ctx.op("Where", ignored, sentinel, target, dtype=target.dtype), _SYMBOLIC_IGNORE_SENTINEL


@converter(aten.nll_loss_forward.default)
def nll_loss_forward(ctx, node, a):
    x = a.self
    if not engine_has("", "NegativeLogLikelihoodLoss", x.dtype) or x.rank < 2 or isinstance(a.reduction, Val):
        return None
    reduction = _REDUCTION[a.reduction]
    target, ignore_index = ignored_target(ctx, a.target, a.ignore_index)
    loss = ctx.op("NegativeLogLikelihoodLoss", x, target, a.weight, reduction=reduction, ignore_index=ignore_index)
    if reduction == "none":
        return loss, ctx.scalar(0.0, x.dtype)
    valid = ctx.op("Not", ctx.op("Equal", target, ctx.scalar(ignore_index, target.dtype), dtype=torch.bool))
    if a.weight is None:
        w = ctx.cast(valid, x.dtype)
    else:
        safe = ctx.op("Where", valid, target, ctx.scalar(0, target.dtype))
        w = ctx.op("Mul", ctx.op("Gather", a.weight, safe, axis=0), ctx.cast(valid, x.dtype))
    total = ctx.op("ReduceSum", w, keepdims=0)
    return loss, total


@converter(aten.native_dropout.default)
def native_dropout(ctx, node, a):
    if a.train is False or a.p == 0:
        mask = ctx.op("ConstantOfShape", ctx.op("Shape", a.input, dtype=torch.int64), dtype=torch.bool,
                      value=_bool_one())
        return ctx.op("Identity", a.input), mask
    return None  # random: torch's generator through the ATen node


def _bool_one():
    from onnx import TensorProto, helper

    return helper.make_tensor("value", TensorProto.BOOL, [1], [True])


@converter(aten.avg_pool2d.default)
def avg_pool2d(ctx, node, a):
    if a.divisor_override is not None:
        return None
    k = _pairs(a.kernel_size, 2)
    s = _pairs(a.stride, 2) if a.stride else k
    p = _pairs(a.padding, 2)
    return ctx.op("AveragePool", a.self, kernel_shape=k, strides=s, pads=p + p, ceil_mode=int(a.ceil_mode),
                  count_include_pad=int(a.count_include_pad))


@converter(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(ctx, node, a):
    if list(a.output_size) != [1, 1]:
        return None
    return ctx.op("GlobalAveragePool", a.self)


@converter(aten._native_batch_norm_legit_no_training.default)
def batch_norm_inference(ctx, node, a):
    if a.weight is None or a.bias is None:
        return None
    y = ctx.op("BatchNormalization", a.input, a.weight, a.bias, a.running_mean, a.running_var,
               epsilon=float(a.eps), momentum=float(1 - a.momentum) if a.momentum is not None else None)
    empty = ctx.const(np.zeros([0], np.float32), a.input.dtype)
    return y, empty, empty



def _plane_base(ctx, x: Val):
    """Torch's max-pool indices are flat within each (n, c) plane, ONNX MaxPool's over the whole
    tensor: the offset between them, (n * C + c) * H * W, as an [N, C, 1, 1] int64 constant. None when
    the input's shape is not static."""
    shape = x.static_shape()
    if shape is None or len(shape) != 4:
        return None
    n, c, h, w = shape
    base = (np.arange(n * c, dtype=np.int64) * (h * w)).reshape(n, c, 1, 1)
    return ctx.const(base, torch.int64)


@converter(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(ctx, node, a):
    x = a.self
    base = _plane_base(ctx, x)
    if base is None:
        return None
    k = _pairs(a.kernel_size, 2)
    s = _pairs(a.stride, 2) if a.stride else k
    p, d = _pairs(a.padding, 2), _pairs(a.dilation, 2)
    y, idx = ctx.op("MaxPool", x, outputs=2, dtypes=[x.dtype, torch.int64], kernel_shape=k, strides=s,
                    pads=p + p, dilations=d, ceil_mode=int(a.ceil_mode))
    # Saved for the backward graph in torch's convention, so an eager backward reads it right too.
    return y, ctx.op("Sub", idx, base)


@converter(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(ctx, node, a):
    x = a.self
    base = _plane_base(ctx, x)
    if base is None or not engine_has(MS_DOMAIN, "MaxPoolGrad", x.dtype):
        return None
    return ctx.op("MaxPoolGrad", a.grad_output, ctx.op("Add", a.indices, base), x, domain=MS_DOMAIN)


@converter(aten._native_batch_norm_legit_functional.default)
def batch_norm_training(ctx, node, a):
    x = a.input
    if not a.training or a.weight is None or a.bias is None or not engine_has(MS_DOMAIN, "BatchNormInternal", x.dtype):
        return None
    y, mean, var, saved_mean, saved_inv_std = ctx.op(
        "BatchNormInternal", x, a.weight, a.bias, a.running_mean, a.running_var, outputs=5, domain=MS_DOMAIN,
        dtypes=[x.dtype, a.running_mean.dtype, a.running_var.dtype, x.dtype, x.dtype],
        epsilon=float(a.eps), momentum=float(1 - a.momentum), training_mode=1)
    return y, saved_mean, saved_inv_std, mean, var


@converter(aten.native_batch_norm_backward.default)
def batch_norm_backward(ctx, node, a):
    x = a.input
    if not a.train or a.weight is None or not engine_has(MS_DOMAIN, "BatchNormalizationGrad", x.dtype):
        return None
    dx, dw, db = ctx.op("BatchNormalizationGrad", a.grad_out, x, a.weight, a.save_mean, a.save_invstd, outputs=3,
                        domain=MS_DOMAIN, epsilon=float(a.eps))
    want = a.output_mask
    return dx if want[0] else None, dw if want[1] else None, db if want[2] else None
