"""The decomposition table of the "ort" backend: which ATen ops AOTAutograd breaks into others before
they reach the exporter.

Policy: keep an op whole when the engine has a fused kernel for it (layer norm, softmax, log-softmax,
gelu and their gradients, convolution and its gradient, embedding backward, NLL loss) or when torch's
own kernel is the best implementation (scaled-dot-product attention, its backward and dropout run as
ATen nodes). Decompose an op when its decomposition is a few elementwise/reduction ops the engine runs
natively, so the graph stays on native kernels instead of an ATen node. The list is explicit so that a
torch upgrade cannot silently change what reaches us.
"""

from __future__ import annotations

import functools

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

DECOMPOSED_OPS = [
    # elementwise gradients without a fused engine kernel
    aten.silu_backward,
    aten.hardsigmoid_backward,
    aten.hardswish_backward,
    aten.hardtanh_backward,
    aten.leaky_relu_backward,
    aten.elu_backward,
    aten.softplus_backward,
    aten.mish_backward,
    aten.glu,
    aten.glu_backward,
    # small compositions of native ops
    aten.addcmul,
    aten.addcdiv,
    aten.baddbmm,
    aten.addmv,
    aten.var_mean,
    aten.var,
    aten.std,
    aten.std_mean,
    aten.logsumexp,
    aten.mse_loss,
    aten.mse_loss_backward,
    aten.binary_cross_entropy_with_logits,
    aten.smooth_l1_loss,
    aten.l1_loss,
    aten.hardsigmoid,
    aten.hardswish,
    aten.mish,
    aten.elu,
    aten.celu,
    aten.selu,
    aten.linalg_vector_norm,
    aten.norm,
    aten.expand_as,
    aten.narrow,
    aten.split_with_sizes_copy,
    aten.unbind_copy,
]


@functools.cache
def decomposition_table() -> dict:
    return get_decompositions(DECOMPOSED_OPS)


def attention_kernels(keep_sdpa: bool):
    """The context AOTAutograd traces in. ORTMODULE_ATEN_SDPA_FALLBACK=0 (aten_sdpa_fallback=False)
    selects torch's math attention, a composite of matmul, softmax and matmul, so both the forward and
    the backward graph hold ops the engine runs natively, as onnxruntime-training exported attention
    without the fallback. Choosing it before autograd matters: a decomposition of the fused op would
    decompose only the forward and leave the fused backward kernel in the backward graph."""
    import contextlib

    if keep_sdpa:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)
