"""The engine's float16 / bfloat16 kernels for the ops autocast graphs hold besides GEMMs (norms,
softmax, activations and their gradients), compiled with backend="ort" on 16-bit tensors and
compared with float64 evaluated on the same 16-bit inputs.

Forward tolerance, from the arithmetic: the kernels compute 16-bit inputs in float32 and round each
result once to the 16-bit type, so the norm-wise relative error of an op exported as one kernel is
at most the unit roundoff u (2^-8 bfloat16, 2^-11 float16) plus float32's own error (2^-20 covers
the few float32 operations of these kernels); an op exported as n kernels in a row (SiLU = x *
Sigmoid(x)) rounds n times: n u.

Gradients read 16-bit values the forward saved (the softmax output, the normalisation statistics)
and so carry their rounding as well: as in tests/python/test_autocast_models.py, the gradient of
"ort" must be within twice eager PyTorch's own 16-bit error against float64, plus one u.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from torch_ort_backend import compile_stats
from compile_harness import _reset_dynamo

UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
FLOAT32_SLACK = 2.0 ** -20
D = 96


@pytest.fixture(autouse=True)
def no_silent_fallback(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")


def _layer_norm(x, w, b):
    return F.layer_norm(x, (D,), w, b, eps=1e-5)


# name -> (function of x (and 16-bit parameters), roundings of its forward in the engine)
CASES = {
    "softmax": (lambda x: torch.softmax(x, dim=-1), 1),
    "log_softmax": (lambda x: torch.log_softmax(x, dim=-1), 1),
    "layer_norm": (_layer_norm, 1),
    "gelu": (F.gelu, 1),
    "gelu_tanh": (functools.partial(F.gelu, approximate="tanh"), 1),
    "tanh": (torch.tanh, 1),
    "sigmoid": (torch.sigmoid, 1),
    "silu": (F.silu, 2),
}


def _normwise(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


def _forward_backward(fn, inputs: list[torch.Tensor], grad: torch.Tensor) -> tuple[torch.Tensor, list]:
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    y = fn(*leaves)
    y.backward(grad)
    return y.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", list(CASES))
def test_half_kernel_against_float64(name, dtype):
    fn, roundings = CASES[name]
    gen = torch.Generator().manual_seed(20)
    # Random, non-zero: magnitudes in [0.1, 2) with random signs, rounded to the 16-bit type.
    def nonzero(*shape):
        mag = torch.rand(*shape, generator=gen) * 1.9 + 0.1
        return (mag * torch.where(torch.rand(*shape, generator=gen) < 0.5, -1.0, 1.0)).to(dtype)

    inputs = [nonzero(8, 16, D)]
    if name == "layer_norm":
        inputs += [nonzero(D), nonzero(D)]
    grad = nonzero(8, 16, D)

    _reset_dynamo()
    y, grads = _forward_backward(torch.compile(fn, backend="ort"), inputs, grad)
    stats = compile_stats()
    assert stats.runs >= 2 and stats.fallbacks == 0, stats
    assert not stats.aten_fallback_ops, dict(stats.aten_fallback_ops)
    assert y.dtype == dtype and all(g.dtype == dtype for g in grads)

    y64, grads64 = _forward_backward(fn, [t.double() for t in inputs], grad.double())
    _, eager_grads = _forward_backward(fn, inputs, grad)
    u = UNIT_ROUNDOFF[dtype]
    err = _normwise(y, y64)
    assert err <= roundings * u + FLOAT32_SLACK, f"{name} forward: {err:.2e} from float64, bound {roundings} u"
    for i, (got, want, eager) in enumerate(zip(grads, grads64, eager_grads)):
        ours_err, eager_err = _normwise(got, want), _normwise(eager, want)
        assert ours_err <= 2 * eager_err + u, (
            f"{name} gradient of input {i}: {ours_err:.2e} from float64, eager {dtype} {eager_err:.2e}")
