"""What runs when the engine (or eager PyTorch) executes a PythonOp or a PythonOpGrad.

Forward: the Function is applied exactly as eager autograd applies it (``fn_cls.apply``, with
inputs that require grad as the compiled graph says they did), so its ctx is the real one: saved
tensors with their version checks, needs_input_grad, mark_dirty, mark_non_differentiable,
set_materialize_grads, attributes the forward sets. The ctx is kept in a table under a random id that
the op returns as a 0-d int64 tensor (the node's first output). The tensor's memory is a numpy
array whose finalizer drops the table entry: the ctx lives exactly as long as that tensor, which
AOTAutograd saves for the backward and frees after it (or with the forward's graph when no
backward runs), so nothing leaks across steps and retain_graph works.

Backward: the Function's backward is called with that ctx and the output gradients, after the
checks and conversions torch's autograd engine applies around a Python Function (materialized
gradients, reduced broadcast gradients, dtype casts, gradient count).
"""

from __future__ import annotations

import secrets
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from .registry import PythonOpError, build_arguments, decode_constants, resolve_function

_CONTEXTS: dict[int, "ForwardRecord"] = {}
_CONTEXT_LOCK = threading.Lock()
_AUTOGRAD_KEYS = (
    torch._C.DispatchKey.AutogradFunctionality,
    torch._C.DispatchKey.AutogradOther,
    torch._C.DispatchKey.AutogradNestedTensor,
    torch._C.DispatchKey.ADInplaceOrView,
)


@dataclass
class ForwardRecord:
    func_name: str
    fn_cls: type
    ctx: Any  # the Function's autograd node (its ctx), None when nothing required grad
    output_meta: list[tuple[torch.Size, torch.dtype, torch.device]]
    output_differentiable: list[bool]
    input_meta: list[tuple[torch.Size, torch.dtype, torch.device]]  # every tensor input
    tensor_positions: list[int]  # argument position of each tensor input
    num_args: int


def live_contexts() -> int:
    """How many forward contexts are alive (tests check that none outlives its step)."""
    with _CONTEXT_LOCK:
        return len(_CONTEXTS)


def _release(k: int) -> None:
    with _CONTEXT_LOCK:
        _CONTEXTS.pop(k, None)


def _context_tensor(record: ForwardRecord | None) -> torch.Tensor:
    if record is None:
        return torch.zeros((), dtype=torch.int64)
    # A random id (63 bits; 0 means "no ctx"): a PythonOpGrad of a loaded model cannot guess a
    # live ctx of this process's own graphs.
    with _CONTEXT_LOCK:
        k = 0
        while k == 0 or k in _CONTEXTS:
            k = secrets.randbits(63)
        _CONTEXTS[k] = record
    holder = np.array(k, dtype=np.int64)
    weakref.finalize(holder, _release, k)
    return torch.from_numpy(holder)


def with_autograd_dispatch():
    """The dispatch keys as eager code sees them. The engine calls in without excluding autograd,
    but eager execution of the op (the fallback path) reaches the kernel below the autograd key,
    and a Function may need autograd itself (a checkpoint's backward recomputes with grad)."""
    include = torch._C._dispatch_tls_local_include_set()
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in _AUTOGRAD_KEYS:
        exclude = exclude.remove(key)
    return torch._C._ForceDispatchKeyGuard(include, exclude)


def _storages(tensors: Sequence[torch.Tensor | None]) -> frozenset[int]:
    return frozenset(t.untyped_storage().data_ptr() for t in tensors if t is not None and t.numel() > 0)


def _shares_memory(t: torch.Tensor, storages: frozenset[int]) -> bool:
    return t.numel() > 0 and t.untyped_storage().data_ptr() in storages


def _fresh(t: torch.Tensor, storages: frozenset[int]) -> torch.Tensor:
    """An output the engine may own: contiguous, and never a view of an input (the engine reuses its
    buffers; an aliased result would change under it)."""
    t = t.detach()
    if not t.is_contiguous() or _shares_memory(t, storages):
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _own_engine_memory(storages: frozenset[int]):
    """Pack hook for ctx.save_for_backward: an input is a view of the engine's memory, which the
    engine reuses once the forward graph is done with it (its arena serves the next run), so a saved
    input is copied; everything else is saved as eager autograd saves it. (The hook lives as long as
    the saved tensor: it holds storage addresses, not the inputs.)"""

    def pack(t: torch.Tensor) -> torch.Tensor:
        if _shares_memory(t, storages):
            copy = t.detach().clone()
            return copy.requires_grad_(t.requires_grad) if copy.is_floating_point() else copy
        return t

    return pack


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def _let_go_of_engine_memory(ctx: Any, leaves: list[torch.Tensor], storages: frozenset[int]) -> None:
    """The ctx outlives the engine run whose memory the inputs view (the backward runs later), so it
    may keep no view of it: the graph edges to the input leaves are emptied (the backward calls the
    Function's backward directly, never through them), and a tensor the forward put on the ctx as
    an attribute instead of saving it is copied (saved tensors are copied when packed)."""
    for leaf in leaves:
        if _shares_memory(leaf, storages):
            leaf.data = torch.empty(0, dtype=leaf.dtype, device=leaf.device)
    attrs = getattr(ctx, "__dict__", {})
    for key, value in list(attrs.items()):
        if isinstance(value, torch.Tensor) and _shares_memory(value, storages):
            attrs[key] = value.detach().clone()
        elif isinstance(value, (list, tuple)) and any(
                isinstance(v, torch.Tensor) and _shares_memory(v, storages) for v in value):
            attrs[key] = type(value)(v.detach().clone() if isinstance(v, torch.Tensor) and _shares_memory(v, storages)
                                     else v for v in value)


def _as_tuple(outputs: Any) -> tuple:
    return outputs if isinstance(outputs, tuple) else (outputs,)


def run_forward(func_name: str, input_convention: str, constant_args: str, input_requires_grads: Sequence[int],
                non_differentiable_outputs: Sequence[int], inplace_inputs: Sequence[int],
                inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """tob::python_op: [context, *outputs]."""
    fn_cls = resolve_function(func_name)
    constants = decode_constants(constant_args)
    if len(input_requires_grads) not in (0, len(inputs)):
        raise PythonOpError(f"PythonOp {func_name}: input_requires_grads has {len(input_requires_grads)} entries "
                            f"for {len(inputs)} tensor inputs")
    requires = [bool(r) for r in input_requires_grads] or [False] * len(inputs)
    dirty = set(inplace_inputs)
    training = any(requires)
    storages = _storages(inputs)
    with with_autograd_dispatch(), torch.set_grad_enabled(training):
        wrapped, leaves = [], []
        for i, t in enumerate(inputs):
            w = t.detach()
            if requires[i] and w.is_floating_point():
                w.requires_grad_(True)
                leaves.append(w)
            if i in dirty:
                # The Function writes into it: a copy keeps the engine's buffer intact, and a
                # non-leaf may be modified in place where a leaf requiring grad may not.
                w = w.clone()
            wrapped.append(w)
        args = build_arguments(input_convention, wrapped, constants)
        if training:
            with torch.autograd.graph.saved_tensors_hooks(_own_engine_memory(storages), _unpack):
                outputs = _as_tuple(fn_cls.apply(*args))
        else:
            outputs = _as_tuple(fn_cls.apply(*args))
    results = []
    ctx = None
    output_meta = []
    for j, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor):
            raise PythonOpError(f"PythonOp {func_name}: output {j} is a {type(o).__name__}; the graph was "
                                f"compiled for tensor outputs")
        if ctx is None and o.grad_fn is not None and type(o.grad_fn) is getattr(fn_cls, "_backward_cls", None):
            ctx = o.grad_fn
        output_meta.append((o.shape, o.dtype, o.device, o.requires_grad))
        results.append(_fresh(o, storages))
    del outputs, args
    record = None
    if training and ctx is not None:
        _let_go_of_engine_memory(ctx, leaves, storages)
        record = ForwardRecord(func_name, fn_cls, ctx, [m[:3] for m in output_meta], [m[3] for m in output_meta],
                               [(t.shape, t.dtype, t.device) for t in inputs],
                               [i for i, k in enumerate(input_convention) if k == "d"], len(input_convention))
    return [_context_tensor(record), *results]


def _lookup(func_name: str, context: torch.Tensor) -> ForwardRecord:
    if context.numel() != 1 or context.dtype != torch.int64:
        raise PythonOpError(f"PythonOpGrad {func_name}: the context input must be a 0-d int64 tensor, "
                            f"got {context.dtype}{list(context.shape)}")
    k = int(context.reshape(()).item())
    with _CONTEXT_LOCK:
        record = _CONTEXTS.get(k)
    if record is None:
        raise PythonOpError(f"PythonOpGrad {func_name}: forward context #{k} does not exist (its forward ran "
                            f"without grad, or its tensors were already freed)")
    if record.func_name != func_name:
        raise PythonOpError(f"PythonOpGrad {func_name}: context #{k} belongs to {record.func_name}")
    return record


def _reduce_to(grad: torch.Tensor, shape: torch.Size, func_name: str, index: int) -> torch.Tensor:
    """What autograd does to a gradient of the wrong shape: sum a broadcast one back, reject others."""
    if grad.shape == shape:
        return grad
    try:
        expandable = torch.broadcast_shapes(shape, grad.shape) == grad.shape
    except RuntimeError:
        expandable = False
    if not expandable:
        raise PythonOpError(f"Function {func_name} returned an invalid gradient at index {index} - got "
                            f"{list(grad.shape)} but expected shape compatible with {list(shape)}")
    return grad.sum_to_size(shape)


def run_backward(func_name: str, context: torch.Tensor, grads: Sequence[torch.Tensor | None],
                 input_requires_grads: Sequence[int]) -> list[torch.Tensor]:
    """tob::python_op_grad: one gradient per tensor input that requires grad."""
    record = _lookup(func_name, context)
    ctx = record.ctx
    if len(grads) > len(record.output_meta):
        raise PythonOpError(f"PythonOpGrad {func_name}: {len(grads)} output gradients for "
                            f"{len(record.output_meta)} outputs")
    grads = list(grads) + [None] * (len(record.output_meta) - len(grads))  # trailing Nones may be left out
    materialize = getattr(ctx, "_tob_materialize_grads", True)
    materialize_non_differentiable = getattr(ctx, "_materialize_non_diff_grads", True)
    grad_outputs = []
    for g, (shape, dtype, device), differentiable in zip(grads, record.output_meta, record.output_differentiable):
        if g is None and materialize and (differentiable or materialize_non_differentiable):
            g = torch.zeros(shape, dtype=dtype, device=device)
        grad_outputs.append(g)
    with with_autograd_dispatch(), torch.no_grad():
        result = _as_tuple(record.fn_cls.backward(ctx, *grad_outputs))
    if len(result) < record.num_args or any(r is not None for r in result[record.num_args:]):
        raise PythonOpError(f"function {func_name}Backward returned an incorrect number of gradients "
                            f"(expected {record.num_args}, got {len(result)})")
    requires = [bool(r) for r in input_requires_grads]
    grad_storages = _storages(grads)
    out = []
    for i, position in enumerate(record.tensor_positions):
        if i >= len(requires) or not requires[i]:
            continue
        shape, dtype, device = record.input_meta[i]
        g = result[position]
        if g is None:
            g = torch.zeros(shape, dtype=dtype, device=device)
        elif not isinstance(g, torch.Tensor):
            raise PythonOpError(f"function {func_name}Backward returned a {type(g).__name__} as the gradient "
                                f"of argument {position}; expected a tensor or None")
        else:
            g = _reduce_to(g.detach(), shape, func_name, position)
            if g.dtype != dtype or g.device != device:
                g = g.to(dtype=dtype, device=device)
        out.append(_fresh(g, grad_storages))
    return out


def _record_materialize_grads() -> None:
    """ctx.set_materialize_grads stores its flag where Python cannot read it back; keep a readable
    copy so the backward can materialize exactly as autograd would."""
    cls = torch.autograd.function.FunctionCtx
    original = cls.set_materialize_grads
    if getattr(original, "_tob_records", False):
        return

    def set_materialize_grads(self, value: bool):
        original(self, value)
        self._tob_materialize_grads = bool(value)

    set_materialize_grads._tob_records = True
    set_materialize_grads.__doc__ = original.__doc__
    cls.set_materialize_grads = set_materialize_grads


_record_materialize_grads()
