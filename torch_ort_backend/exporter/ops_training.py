"""Backward ops of the forward family, mapped to the engine's training ops (com.microsoft, fused) where
it has kernels for them; otherwise the converter declines and the op runs as an ATen node."""

from __future__ import annotations

import math

import numpy as np
import torch

from .context import MS_DOMAIN, Val
from .engine_ops import engine_has
from .ops_nn import ignored_target
from .registry import converter

aten = torch.ops.aten
_REDUCTION = {0: "none", 1: "mean", 2: "sum"}


def _ms(op_type: str, dtype) -> bool:
    return engine_has(MS_DOMAIN, op_type, dtype)


@converter(aten.threshold_backward.default)
def threshold_backward(ctx, node, a):
    if a.threshold != 0 or not _ms("ReluGrad", a.grad_output.dtype):
        return None
    return ctx.op("ReluGrad", a.grad_output, a.self, domain=MS_DOMAIN)


@converter(aten.gelu_backward.default)
def gelu_backward(ctx, node, a):
    op = "FastGeluGrad" if a.approximate == "tanh" else "GeluGrad"
    if not _ms(op, a.grad_output.dtype):
        return None
    return ctx.op(op, a.grad_output, a.self, domain=MS_DOMAIN)


@converter(aten.sigmoid_backward.default)
def sigmoid_backward(ctx, node, a):
    if not _ms("SigmoidGrad", a.grad_output.dtype):
        return None
    return ctx.op("SigmoidGrad", a.grad_output, a.output, domain=MS_DOMAIN)


@converter(aten.tanh_backward.default)
def tanh_backward(ctx, node, a):
    if not _ms("TanhGrad", a.grad_output.dtype):
        return None
    return ctx.op("TanhGrad", a.grad_output, a.output, domain=MS_DOMAIN)


@converter(aten._softmax_backward_data.default)
def softmax_backward(ctx, node, a):
    if a.grad_output.dtype != a.input_dtype or not _ms("SoftmaxGrad_13", a.grad_output.dtype):
        return None
    return ctx.op("SoftmaxGrad_13", a.grad_output, a.output, axis=a.dim, domain=MS_DOMAIN)


@converter(aten._log_softmax_backward_data.default)
def log_softmax_backward(ctx, node, a):
    if a.grad_output.dtype != a.input_dtype or not _ms("LogSoftmaxGrad_13", a.grad_output.dtype):
        return None
    return ctx.op("LogSoftmaxGrad_13", a.grad_output, a.output, axis=a.dim, domain=MS_DOMAIN)


@converter(aten.native_layer_norm_backward.default)
def layer_norm_backward(ctx, node, a):
    x = a.input
    if not _ms("LayerNormalizationGrad", x.dtype):
        return None
    axis = x.rank - len(a.normalized_shape)
    scale = a.weight
    if scale is None:
        if not all(isinstance(s, int) for s in a.normalized_shape):
            return None
        scale = ctx.const(np.ones(list(a.normalized_shape)), x.dtype)
    want_dx, want_dw, want_db = a.output_mask
    # torch declares a 16-bit input's saved statistics 16-bit (the forward casts our float32 Mean and
    # InvStdDev down to match); the gradient op reads them in float32, and widening loses nothing.
    mean, rstd = (v if v.dtype in (torch.float32, torch.float64) else ctx.cast(v, torch.float32)
                  for v in (a.mean, a.rstd))
    dy, x_in = a.grad_out, x
    if scale.dtype != x.dtype:
        # Autocast's mixed layer norm (a bfloat16 input, float32 weight and bias; torch's CPU kernel
        # takes it): the op wants one type, so the gradient runs in the weight's type (the kernel
        # computes 16-bit types in float32 anyway: widening is exact) and dx is rounded back once.
        dy, x_in = ctx.cast(dy, scale.dtype), ctx.cast(x, scale.dtype)
    dx, dw, db = ctx.op("LayerNormalizationGrad", dy, x_in, scale, mean, rstd, outputs=3, axis=axis,
                        domain=MS_DOMAIN, dtypes=[x_in.dtype, scale.dtype, scale.dtype])
    if want_dx and dx.dtype != x.dtype:
        dx = ctx.cast(dx, x.dtype)
    return (dx if want_dx else None, dw if (want_dw and a.weight is not None) else None,
            db if (want_db and a.bias is not None) else None)


@converter(aten.nll_loss_backward.default)
def nll_loss_backward(ctx, node, a):
    x = a.self
    if not _ms("NegativeLogLikelihoodLossGrad", x.dtype) or x.rank < 2 or isinstance(a.reduction, Val):
        return None
    target, ignore_index = ignored_target(ctx, a.target, a.ignore_index)
    return ctx.op("NegativeLogLikelihoodLossGrad", a.grad_output, x, target, a.weight,
                  reduction=_REDUCTION[a.reduction], ignore_index=ignore_index, domain=MS_DOMAIN)


@converter(aten.embedding_dense_backward.default)
def embedding_backward(ctx, node, a):
    g = a.grad_output
    if a.scale_grad_by_freq or not _ms("GatherGrad", g.dtype) or not isinstance(a.num_weights, int):
        return None
    dim = g.shape[-1] if g.shape is not None else None
    if not isinstance(dim, int):
        return None
    dx = ctx.op("GatherGrad", ctx.ints([a.num_weights, dim]), a.indices, g, axis=0, domain=MS_DOMAIN)
    if a.padding_idx is not None and a.padding_idx >= 0:
        keep = np.ones([a.num_weights, 1], dtype=np.float32)
        keep[a.padding_idx] = 0
        dx = ctx.op("Mul", dx, ctx.const(keep, g.dtype))
    return dx


@converter(aten.native_dropout_backward.default)
def dropout_backward(ctx, node, a):
    dt = a.grad_output.dtype
    return ctx.op("Mul", ctx.op("Mul", a.grad_output, ctx.cast(a.mask, dt)), ctx.scalar(a.scale, dt))


# A stride-1 conv's output images above this many positions take torch's convolution_backward.
_TORCH_CONV_GRAD_MIN_POSITIONS = 16


def _torch_conv_grad_wins(grad_output, strides) -> bool:
    """Whether torch's CPU convolution_backward (oneDNN's direct kernels) is the faster one: measured
    per conv shape against our ConvGrad (one thread, docs/performance.md "Convolution backward"),
    torch's wins on stride-1 convs with larger output images (1.1-2x ours on 8x8 to 26x26 with an
    input gradient), ours on strided convs and small images (up to 4x4), where torch's per-call cost
    dominates. First-layer convs (no input gradient) go either way by shape, and the rule does not
    single them out. An output whose size is unknown at export keeps torch's kernel."""
    shape = grad_output.static_shape()
    if shape is None:
        return True
    positions = math.prod(shape[2:])
    return all(s == 1 for s in strides) and positions > _TORCH_CONV_GRAD_MIN_POSITIONS


@converter(aten.convolution_backward.default)
def convolution_backward(ctx, node, a):
    x, w = a.input, a.weight
    if a.transposed or not _ms("ConvGrad", x.dtype) or any(not isinstance(p, int) for p in a.padding):
        return None
    nd = w.rank - 2
    if any(o for o in a.output_padding):
        return None

    def pairs(v):
        v = list(v)
        return v * nd if len(v) == 1 else v

    pads = pairs(a.padding)
    if ctx.kernels_by_shape and _torch_conv_grad_wins(a.grad_output, pairs(a.stride)):
        return None  # an ATen node: torch's kernel
    dx, dw, db = ctx.op("ConvGrad", a.grad_output, x, w, outputs=3, domain=MS_DOMAIN,
                        strides=pairs(a.stride), pads=pads + pads, dilations=pairs(a.dilation), group=a.groups,
                        kernel_shape=[int(s) for s in w.shape[2:]] if w.static_shape() else None)
    want_dx, want_dw, want_db = a.output_mask
    return (dx if want_dx else None, dw if want_dw else None, db if (want_db and a.bias_sizes) else None)
