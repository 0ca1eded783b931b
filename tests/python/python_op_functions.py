"""torch.autograd.Functions of the kinds real models carry, for the PythonOp tests
(test_python_op*.py): a custom GeLU, a numpy one, a data-dependent one, two outputs with one
non-differentiable, constant arguments of every kind, an in-place one (mark_dirty), one that needs
set_materialize_grads, and a ``Scale`` whose twin of the same class name lives in
python_op_functions_twin.py."""

from __future__ import annotations

import math

import numpy as np
import torch

CALLS = {"forward": 0, "backward": 0}


class CustomGelu(torch.autograd.Function):
    """tanh-approximated GeLU written out, with its own backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        k = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + torch.tanh(k * (x + 0.044715 * x ** 3)))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        k = math.sqrt(2.0 / math.pi)
        inner = k * (x + 0.044715 * x ** 3)
        t = torch.tanh(inner)
        d_inner = k * (1.0 + 3 * 0.044715 * x ** 2)
        return grad * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner)


class NumpyErfGelu(torch.autograd.Function):
    """Exact GeLU through numpy (math.erf per element): TorchDynamo cannot trace this forward."""

    @staticmethod
    def forward(ctx, x):
        CALLS["forward"] += 1
        ctx.save_for_backward(x)
        a = x.detach().cpu().numpy().astype(np.float64)
        erf = np.vectorize(math.erf)(a / math.sqrt(2.0))
        return torch.from_numpy(0.5 * a * (1.0 + erf)).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        CALLS["backward"] += 1
        (x,) = ctx.saved_tensors
        a = x.detach().numpy().astype(np.float64)
        cdf = 0.5 * (1.0 + np.vectorize(math.erf)(a / math.sqrt(2.0)))
        pdf = np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
        return grad * torch.from_numpy(cdf + a * pdf).to(grad.dtype)


class DataDependentNormalize(torch.autograd.Function):
    """Divides by the largest magnitude when it exceeds 1: a Python branch on a value (.item())."""

    @staticmethod
    def forward(ctx, x):
        limit = float(x.abs().max().item())
        ctx.scale = 1.0 / limit if limit > 1.0 else 1.0
        return x * ctx.scale

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale


class TopValueAndIndex(torch.autograd.Function):
    """Two outputs: the row maximum (differentiable) and its index (int64, marked non-differentiable),
    plus a float mask also marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):
        values, index = x.max(dim=-1)
        mask = (x == values.unsqueeze(-1)).to(x.dtype)
        ctx.mark_non_differentiable(index, mask)
        ctx.save_for_backward(index)
        ctx.shape = x.shape
        return values, index, mask

    @staticmethod
    def backward(ctx, grad_values, grad_index, grad_mask):
        (index,) = ctx.saved_tensors
        assert grad_index is not None and grad_mask is not None, "materialized by default"
        out = torch.zeros(ctx.shape, dtype=grad_values.dtype)
        return out.scatter(-1, index.unsqueeze(-1), grad_values.unsqueeze(-1))


class Mixed(torch.autograd.Function):
    """Constants of every kind before, between and after the tensors: float, int, tuple, bool, str,
    None, dtype."""

    @staticmethod
    def forward(ctx, alpha, x, shift, y, offsets, flag, mode, nothing, dtype):
        assert isinstance(alpha, float) and isinstance(shift, int) and not isinstance(shift, bool)
        assert isinstance(offsets, tuple) and isinstance(flag, bool) and isinstance(mode, str)
        assert nothing is None and isinstance(dtype, torch.dtype)
        ctx.scale = alpha * (2.0 if flag else 1.0) * (-1.0 if mode == "neg" else 1.0)
        ctx.save_for_backward(x, y)
        z = alpha * x * y + shift + sum(offsets)
        if flag:
            z = z * 2
        if mode == "neg":
            z = -z
        return z.to(dtype)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        g = grad * ctx.scale
        return None, g * y, None, g * x, None, None, None, None, None


class VariadicScale(torch.autograd.Function):
    """One tensor anywhere among constants: scales it by a number computed from repr() of the
    constants, so a constant that comes back as another type or value (a tuple as a list, True as
    1, 3 as 3.0) changes the result."""

    @staticmethod
    def forward(ctx, *args):
        position = next(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        constants = args[:position] + args[position + 1:]
        ctx.position, ctx.count = position, len(args)
        ctx.scale = 1.0 + 0.01 * len(repr(constants)) + 0.001 * sum(map(ord, repr(constants)))
        return args[position] * ctx.scale

    @staticmethod
    def backward(ctx, grad):
        grads = [None] * ctx.count
        grads[ctx.position] = grad * ctx.scale
        return tuple(grads)


class ScaleByObject(torch.autograd.Function):
    """Reads a factor from an arbitrary Python object passed by reference."""

    @staticmethod
    def forward(ctx, x, config):
        ctx.factor = config.factor
        return x * config.factor

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


class InplaceScale(torch.autograd.Function):
    """Multiplies its input in place (mark_dirty) and returns it."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        x.mul_(factor)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


class NoMaterialize(torch.autograd.Function):
    """Two outputs; backward sees None for the one that got no gradient (set_materialize_grads)."""

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, g2, g3):
        CALLS["no_materialize_none"] = (g2 is None, g3 is None)
        grad = torch.zeros_like(g2 if g2 is not None else g3)
        if g2 is not None:
            grad = grad + 2 * g2
        if g3 is not None:
            grad = grad + 3 * g3
        return grad


class NeedsInputGrad(torch.autograd.Function):
    """Returns a gradient only for the inputs needs_input_grad asks for, and records what it saw."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        CALLS["needs_input_grad"] = tuple(ctx.needs_input_grad)
        return (grad * b if ctx.needs_input_grad[0] else None,
                grad * a if ctx.needs_input_grad[1] else None)


class Scale(torch.autograd.Function):
    """x * 2 (python_op_functions_twin.Scale multiplies by 3)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
