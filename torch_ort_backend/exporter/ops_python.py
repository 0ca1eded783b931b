"""tob::python_op / tob::python_op_grad (torch.autograd.Functions, torch_ort_backend.autograd_function)
-> com.microsoft PythonOp / PythonOpGrad.

The node contract (docs/architecture.md, "PythonOp nodes"): every non-tensor argument of the op is
the attribute of the same name (an empty list is left out: the op's default); the tensor inputs
follow in the op's order (PythonOpGrad: the context, then one gradient per forward output, "" for
none, trailing ones omitted). PythonOp's outputs are the context (int64 0-d) and the Function's
outputs; PythonOpGrad's are the gradients of the forward inputs that require grad. The arguments
that only type the gradients while tracing (grad_shapes, grad_ranks, grad_dtypes) are not written.
"""

from __future__ import annotations

from typing import Any

from ..autograd_function import custom_ops
from .context import MS_DOMAIN, Val, val_from_meta
from .errors import UnsupportedTorchModelError
from .registry import converter


def _outputs(ctx, node, op_type: str, inputs: list, attrs: dict) -> list[Val]:
    metas = node.meta.get("val")
    if not isinstance(metas, (list, tuple)):
        raise UnsupportedTorchModelError(f"node '{node.name}' ({op_type}) has no example outputs to type it")
    refs = [val_from_meta(node.name, m) for m in metas]
    attrs = {k: v for k, v in attrs.items() if not (isinstance(v, list) and not v)}
    outs = ctx.op(op_type, *inputs, outputs=len(refs), domain=MS_DOMAIN, dtypes=[r.dtype for r in refs], **attrs)
    outs = outs if isinstance(outs, list) else [outs]
    for o, r in zip(outs, refs):
        o.shape = r.shape
        ctx.declare(o)
    return outs


def _tensor(v: Any, node, what: str) -> Val:
    if not isinstance(v, Val):
        raise UnsupportedTorchModelError(f"node '{node.name}': {what} is {v!r}, not a tensor of the graph")
    return v


@converter(custom_ops.python_op())
def python_op(ctx, node, a):
    inputs = [_tensor(v, node, "an input") for v in a.inputs]
    return _outputs(ctx, node, "PythonOp", inputs, {
        "func_name": a.func_name,
        "input_convention": a.input_convention,
        "constant_args": a.constant_args,
        "input_requires_grads": [int(r) for r in a.input_requires_grads],
        "non_differentiable_outputs": [int(j) for j in a.non_differentiable_outputs],
        "inplace_inputs": [int(i) for i in a.inplace_inputs],
    })


@converter(custom_ops.python_op_grad())
def python_op_grad(ctx, node, a):
    inputs = [_tensor(a.context, node, "the context")]
    inputs += [None if g is None else _tensor(g, node, "a gradient") for g in a.grads]
    return _outputs(ctx, node, "PythonOpGrad", inputs, {
        "func_name": a.func_name,
        "input_requires_grads": [int(r) for r in a.input_requires_grads],
    })
