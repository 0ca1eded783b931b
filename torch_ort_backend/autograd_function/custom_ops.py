"""tob::python_op and tob::python_op_grad: the torch operators a captured torch.autograd.Function
becomes, so that AOTAutograd sees it as one opaque op: python_op in the forward graph, python_op_grad
(through the autograd formula registered here) in the backward graph. The exporter turns them into
com.microsoft PythonOp / PythonOpGrad nodes whose attributes are these arguments by name, and the
engine's torch provider calls them back through the dispatcher (docs/architecture.md, "PythonOp").

    python_op(func_name, input_convention, constant_args, Tensor[] inputs, input_requires_grads,
              non_differentiable_outputs, inplace_inputs) -> [context, *outputs]
    python_op_grad(func_name, Tensor context, Tensor?[] grads, input_requires_grads,
                   grad_shapes, grad_ranks, grad_dtypes) -> one gradient per input that requires grad

grad_shapes / grad_ranks / grad_dtypes only type the gradients while tracing (they may be symbolic);
the nodes leave them out and the kernel runs without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..exporter.aten_encoding import _SCALAR_TYPE_CODES, scalar_type_code
from . import runtime
from .probe import probe
from .registry import decode_constants, resolve_function

NAMESPACE = "tob"

_PYTHON_OP_SCHEMA = (
    "python_op(str func_name, str input_convention, str constant_args, Tensor[] inputs, "
    "int[] input_requires_grads=[], int[] non_differentiable_outputs=[], int[] inplace_inputs=[]) -> Tensor[]")
_PYTHON_OP_GRAD_SCHEMA = (
    "python_op_grad(str func_name, Tensor context, Tensor?[] grads, int[] input_requires_grads=[], "
    "SymInt[] grad_shapes=[], int[] grad_ranks=[], int[] grad_dtypes=[]) -> Tensor[]")

_DTYPE_OF_CODE = {code: dtype for dtype, code in _SCALAR_TYPE_CODES.items()}


def _python_op_fake(func_name: str, input_convention: str, constant_args: str, inputs: Sequence[torch.Tensor],
                    input_requires_grads=(), non_differentiable_outputs=(), inplace_inputs=()) -> list[torch.Tensor]:
    fn_cls = resolve_function(func_name)
    requires = [bool(r) for r in input_requires_grads] or [False] * len(inputs)
    result = probe(fn_cls, func_name, input_convention, constant_args, decode_constants(constant_args),
                   list(inputs), requires)
    context = torch.empty((), dtype=torch.int64)  # the ctx id: a host tensor
    return [context, *(torch.empty(m.shape, dtype=m.dtype, device=m.device) for m in result.outputs)]


def _python_op_grad_fake(func_name: str, context: torch.Tensor, grads: Sequence[torch.Tensor | None],
                         input_requires_grads=(), grad_shapes=(), grad_ranks=(), grad_dtypes=()) -> list[torch.Tensor]:
    device = next((g.device for g in grads if g is not None), context.device)
    outs, at = [], 0
    for rank, code in zip(grad_ranks, grad_dtypes):
        outs.append(torch.empty(tuple(grad_shapes[at:at + rank]), dtype=_DTYPE_OF_CODE[code], device=device))
        at += rank
    return outs


def _python_op_cpu(func_name: str, input_convention: str, constant_args: str, inputs: Sequence[torch.Tensor],
                   input_requires_grads=(), non_differentiable_outputs=(), inplace_inputs=()) -> list[torch.Tensor]:
    return runtime.run_forward(func_name, input_convention, constant_args, list(input_requires_grads),
                               list(non_differentiable_outputs), list(inplace_inputs), list(inputs))


def _python_op_grad_cpu(func_name: str, context: torch.Tensor, grads: Sequence[torch.Tensor | None],
                        input_requires_grads=(), grad_shapes=(), grad_ranks=(), grad_dtypes=()) -> list[torch.Tensor]:
    return runtime.run_backward(func_name, context, list(grads), list(input_requires_grads))


# ---- the autograd formula: python_op's backward is python_op_grad ----
@dataclass
class _GradInfo:
    """What python_op's backward needs from its forward (one attribute: ctx's own names such as
    non_differentiable belong to torch)."""

    func_name: str
    input_requires_grads: list[bool]
    num_outputs: int
    non_differentiable: set[int]
    grad_meta: list[tuple[tuple, torch.dtype]]  # shape and dtype of each input that requires grad
    empty_lists: list[bool]  # arguments given as [] (their "gradient" must be [] too)


def _setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
    func_name, _, _, tensors, input_requires_grads, non_differentiable, _ = inputs
    requires = [bool(r) for r in input_requires_grads] or [False] * len(tensors)
    ctx.python_op = _GradInfo(func_name, requires, len(output) - 1, set(non_differentiable),
                              [(tuple(t.shape), t.dtype) for t, r in zip(tensors, requires) if r],
                              [isinstance(a, list) and not a for a in inputs])
    ctx.save_for_backward(output[0])
    ctx.mark_non_differentiable(output[0], *(output[1 + j] for j in non_differentiable))
    # An output no gradient reaches stays None (not zeros) in the traced backward, so the Function
    # gets None for it, or zeros when it leaves materialize_grads on, as eager autograd decides.
    ctx.set_materialize_grads(False)


def _backward(ctx: Any, grads: list) -> tuple:
    (context,) = ctx.saved_tensors
    info: _GradInfo = ctx.python_op
    outputs = [None if j in info.non_differentiable else g for j, g in enumerate(grads[1:1 + info.num_outputs])]
    shapes = [d for shape, _ in info.grad_meta for d in shape]
    ranks = [len(shape) for shape, _ in info.grad_meta]
    dtypes = [scalar_type_code(dtype) for _, dtype in info.grad_meta]
    input_grads = torch.ops.tob.python_op_grad(info.func_name, context, outputs,
                                               [int(r) for r in info.input_requires_grads], shapes, ranks, dtypes)
    it = iter(input_grads)
    per_input = [next(it) if r else None for r in info.input_requires_grads]
    # The gradients mirror the arguments as given: an empty list (torch.library reads it as an empty
    # tensor list) takes [], and trailing arguments equal to their defaults, which the dispatcher
    # drops, take nothing (needs_input_grad has one entry per argument given).
    grads_out = [[] if empty else None for empty in info.empty_lists]
    grads_out[3] = per_input  # the Tensor[] inputs argument
    return tuple(grads_out[:len(ctx.needs_input_grad)])


_LIBRARY = None


def define() -> None:
    """Defines the two operators (once per process)."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    lib = torch.library.Library(NAMESPACE, "FRAGMENT")
    lib.define(_PYTHON_OP_SCHEMA)
    lib.define(_PYTHON_OP_GRAD_SCHEMA)
    for key in ("CPU", "CUDA"):
        lib.impl("python_op", _python_op_cpu, key)
        lib.impl("python_op_grad", _python_op_grad_cpu, key)
    torch.library.register_fake(f"{NAMESPACE}::python_op", _python_op_fake, lib=lib)
    torch.library.register_fake(f"{NAMESPACE}::python_op_grad", _python_op_grad_fake, lib=lib)
    torch.library.register_autograd(f"{NAMESPACE}::python_op", _backward, setup_context=_setup_context, lib=lib)
    _LIBRARY = lib


def python_op() -> torch._ops.OpOverload:
    define()
    return torch.ops.tob.python_op.default


def python_op_grad() -> torch._ops.OpOverload:
    define()
    return torch.ops.tob.python_op_grad.default
