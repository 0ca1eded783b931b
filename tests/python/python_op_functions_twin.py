"""A ``Scale`` Function with the same class name as python_op_functions.Scale but another module
and another factor: PythonOps tell them apart by their qualified names."""

from __future__ import annotations

import torch


class Scale(torch.autograd.Function):
    """x * 3."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 3
