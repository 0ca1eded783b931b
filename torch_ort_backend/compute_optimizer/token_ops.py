"""What the embedding case (embedding_sparsity.py) needs to know about the ops of a TorchDynamo graph:
a canonical name per op (dynamo's graph holds torch-level calls: ``torch._C._nn.linear``,
``operator.add``, tensor methods such as ``view`` or ``float``), and how an op moves dimensions
(reshapes, indexing), so that the pass can follow the token dimensions of a value through it.

Sizes may be symbolic (dynamic batch or sequence length); they are compared with
``statically_known_true``, which answers without adding guards: an equality that is not known at
compile time counts as unequal, and the pass then declines rather than guess.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import statically_known_true

_UNARY = (torch.tanh, torch.sigmoid, torch.relu, F.relu, F.gelu, F.silu, torch.rsqrt, torch.sqrt, torch.exp,
          torch.log, torch.abs, torch.erf, torch.cos, torch.sin, torch.square, F.mish, F.elu, F.leaky_relu,
          F.hardtanh, F.softplus, F.tanh, F.sigmoid, F.relu6, torch.neg, operator.neg, F.hardswish)
_FUNCTIONS: dict[Any, str] = {f: "unary" for f in _UNARY}
_FUNCTIONS.update({
    operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub", operator.mul: "mul",
    torch.mul: "mul", operator.truediv: "div", torch.div: "div", torch.true_divide: "div", operator.pow: "pow",
    torch.pow: "pow", torch.where: "where", torch.masked_fill: "masked_fill",
    F.linear: "linear", torch.addmm: "addmm", torch.matmul: "matmul", operator.matmul: "matmul", torch.mm: "matmul",
    F.layer_norm: "layer_norm", torch.layer_norm: "layer_norm",
    F.softmax: "softmax", torch.softmax: "softmax", F.log_softmax: "log_softmax", torch.log_softmax: "log_softmax",
    F.dropout: "dropout", F.embedding: "embedding", F.scaled_dot_product_attention: "sdpa",
    F.cross_entropy: "cross_entropy", torch.index_select: "index_select", torch.cat: "cat", torch.concat: "cat",
    torch.reshape: "reshape", torch.flatten: "flatten", torch.transpose: "transpose", torch.permute: "permute",
    torch.unsqueeze: "unsqueeze", torch.squeeze: "squeeze", torch.split: "split", torch.chunk: "chunk",
    torch.mean: "reduce", torch.sum: "reduce", torch.amax: "reduce", torch.var: "reduce", torch.std: "reduce",
    operator.getitem: "getitem", torch.clamp: "unary",
})
if hasattr(F, "rms_norm"):
    _FUNCTIONS[F.rms_norm] = "rms_norm"
_METHODS: dict[str, str] = {
    **{m: "unary" for m in ("tanh", "sigmoid", "relu", "neg", "abs", "exp", "log", "rsqrt", "sqrt", "erf", "cos",
                            "sin", "square", "clamp")},
    **{m: "cast" for m in ("float", "half", "bfloat16", "double", "to", "type", "type_as")},
    **{m: "identity" for m in ("contiguous", "clone", "detach")},
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "masked_fill": "masked_fill",
    "matmul": "matmul", "view": "reshape", "reshape": "reshape", "flatten": "flatten", "transpose": "transpose",
    "permute": "permute", "unsqueeze": "unsqueeze", "squeeze": "squeeze", "expand": "expand", "split": "split",
    "chunk": "chunk", "softmax": "softmax", "log_softmax": "log_softmax", "mean": "reduce", "sum": "reduce",
    "amax": "reduce", "var": "reduce", "std": "reduce", "size": "size", "index_select": "index_select",
}

def op_key(node: torch.fx.Node) -> str | None:
    """The canonical name of a node's op ("add", "linear", "reshape"...), None when the pass does not
    know it (a node it then refuses to move padding through)."""
    if node.op == "call_function":
        try:
            return _FUNCTIONS.get(node.target)
        except TypeError:  # an unhashable target
            return None
    if node.op == "call_method":
        return _METHODS.get(node.target)
    return None


def value(node: Any) -> Any:
    """Dynamo's fake value of a node (``example_value``; ``val`` after AOTAutograd), or None."""
    if not isinstance(node, torch.fx.Node):
        return None
    return node.meta.get("example_value", node.meta.get("val"))


def tensor_value(node: Any) -> torch.Tensor | None:
    v = value(node)
    return v if isinstance(v, torch.Tensor) else None


def same(a: Any, b: Any) -> bool:
    """a == b for sizes that may be symbolic, known at compile time (no guard is added)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        return bool(statically_known_true(a == b))
    except Exception:
        return False


def static_sizes(sizes: Any) -> tuple[int, ...] | None:
    """The sizes as plain ints, or None when one is symbolic."""
    out = []
    for s in sizes:
        if not isinstance(s, int):
            return None
        out.append(s)
    return tuple(out)


def norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _prod(sizes: Any) -> Any:
    p: Any = 1
    for s in sizes:
        p = p * s
    return p


def reshape_dim(in_shape: Any, out_shape: Any, d: int) -> int | None:
    """Where input dim `d` lands in a row-major reshape from `in_shape` to `out_shape`: the output dim
    made of it alone (same size, same elements before it), or None when it is merged or split."""
    for e in range(len(out_shape)):
        if same(out_shape[e], in_shape[d]) and same(_prod(out_shape[:e]), _prod(in_shape[:d])):
            return e
    return None


def is_full_slice(s: Any) -> bool:
    return isinstance(s, slice) and s.start in (None, 0) and s.stop is None and s.step in (None, 1)


def index_dims(index: Any, rank: int) -> tuple[list[int | None], list[bool]] | None:
    """For ``x[index]`` on a tensor of `rank` dims with basic indexing (slices, ints, None, Ellipsis):
    per input dim, the output dim it becomes (None when an int removes it) and whether it is taken
    whole. None for advanced indexing (tensors, lists, bools)."""
    items = index if isinstance(index, tuple) else (index,)
    if any(not (it is None or it is Ellipsis or isinstance(it, (int, slice))) or isinstance(it, bool) for it in items):
        return None
    if sum(it is Ellipsis for it in items) > 1:
        return None
    consumed = sum(isinstance(it, (int, slice)) for it in items)
    if consumed > rank:
        return None
    expanded: list[Any] = []
    for it in items:
        if it is Ellipsis:
            expanded.extend([slice(None)] * (rank - consumed))
        else:
            expanded.append(it)
    expanded.extend([slice(None)] * (rank - sum(isinstance(it, (int, slice)) for it in expanded)))
    where: list[int | None] = []
    whole: list[bool] = []
    out = 0
    for it in expanded:
        if it is None:
            out += 1
        elif isinstance(it, int):
            where.append(None)
            whole.append(False)
        else:
            where.append(out)
            whole.append(is_full_slice(it))
            out += 1
    return where, whole


def dims_arg(node: torch.fx.Node, position: int, name: str = "dim") -> Any:
    """A dim argument given by position or keyword (None when absent)."""
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(name)


def as_dim_list(dims: Any) -> list[int] | None:
    if isinstance(dims, int) and not isinstance(dims, bool):
        return [dims]
    if isinstance(dims, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in dims) and dims:
        return list(dims)
    return None


def scalar_number(x: Any) -> float | None:
    """A Python number argument as float (None otherwise)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


__all__ = ["as_dim_list", "dims_arg", "index_dims", "is_full_slice", "norm_dim", "op_key", "reshape_dim",
           "same", "scalar_number", "static_sizes", "tensor_value", "value"]
