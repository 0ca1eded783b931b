"""Attention written out as matmul / softmax / matmul, fused into one scaled-dot-product attention.

HuggingFace's "eager" attention (``eager_attention_forward`` of transformers 5, and the same shape in
older models), nanoGPT and other hand-written transformers compute

    scores = (Q @ K.transpose(-2, -1)) * scale
    scores = scores + mask                       and/or   scores.masked_fill(cond, -inf)
    probs = softmax(scores, dim=-1 [, dtype]) [.to(V.dtype)] [dropout]
    out = probs @ V

The traced graph holds that chain op by op, so the engine ran two batched GEMMs, a softmax and their
gradients, and the forward saved the [batch, heads, q_len, kv_len] probabilities for the backward.
``fuse_eager_attention`` replaces each chain by ``scaled_dot_product_attention(Q, K, V,
attn_mask=mask, scale=scale)`` before autograd is traced (the gradient then comes from AOTAutograd
or torch.export's joint pass, like the compute optimizer's rewrites), which the exporter maps to the
engine's flash-tiled ``FlashAttention`` / ``FlashAttentionGrad`` (exporter/ops_training_attention.py):
the score matrix is never materialised and the backward saves only the output and the row logsumexp.

It runs on two kinds of graph: TorchDynamo's (torch functions and tensor methods; the "ort" backend
and ORTModule) and torch.export's training IR (ATen overloads; ORTTrainer). The masks: an added
tensor is the additive mask; ``masked_fill(cond, -inf)`` (or the dtype's minimum) becomes the keep
mask ``~cond``; both together become ``where(cond, -inf, mask)``.

The function computed is the same; only float rounding differs (the fused kernel keeps the scores
in float32 and sums in another order). A chain is left alone whenever the fused op would compute
something else or lose information:
- dropout with p > 0 in training (the engine's kernel cannot replay torch's generator stream, so
  the masks, and the numbers the user asked for, would differ);
- a mask that is not a floating tensor of the query's dtype, or float32 for float16/bfloat16
  queries as under autocast (a bool tensor *added* to the scores is arithmetic, not a keep-mask)
  or that requires grad (T5's learned position bias: the fused kernel gives the mask no gradient);
  a masked_fill with any other value than -inf or the dtype's minimum;
- any intermediate (scores, probabilities) read elsewhere, e.g. returned with
  output_attentions=True;
- Q, K, V not of rank 4 with equal batch and head sizes and one floating dtype.

Under autocast (dynamo's graphs): a chain whose Q, K or V is float32 beside a 16-bit operand, as
LLaMA's rotary embedding leaves Q and K (float32 ``cos``/``sin`` promote the bfloat16 projections)
beside a bfloat16 V, is fused when the graph proves autocast cast them at the matmuls: each matmul's
recorded result is float16/bfloat16 while an operand is float32, which only autocast's
lower-precision cast makes of a matmul. The rewrite then writes those casts out (``.to(dtype)`` of
each float32 operand, what autocast does to a matmul's inputs), so the fused op reads what the
matmuls read; its gradients flow back through the casts to the float32 values, as in eager.

ORTMODULE_USE_EFFICIENT_ATTENTION (option ``use_efficient_attention``) switches it, as in
onnxruntime-training; unlike there it is on by default, because the fused kernel is the engine's own
and exact to rounding (docs/torch_compile.md, "Attention").
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

aten = torch.ops.aten

# Each kind: (functions and ATen overloads, tensor method names).
_MATMUL = (frozenset({torch.matmul, operator.matmul, aten.matmul.default}), frozenset({"matmul", "__matmul__"}))
_TRANSPOSE = (frozenset({torch.transpose, aten.transpose.int}), frozenset({"transpose"}))
_MUL = (frozenset({operator.mul, torch.mul, aten.mul.Tensor, aten.mul.Scalar}), frozenset({"mul", "__mul__"}))
_DIV = (frozenset({operator.truediv, torch.div, torch.true_divide, aten.div.Tensor, aten.div.Scalar}),
        frozenset({"div", "__truediv__"}))
_ADD = (frozenset({operator.add, torch.add, aten.add.Tensor}), frozenset({"add", "__add__"}))
_MASKED_FILL = (frozenset({torch.masked_fill, aten.masked_fill.Scalar}), frozenset({"masked_fill"}))
_SOFTMAX = (frozenset({F.softmax, torch.softmax, aten.softmax.int}), frozenset({"softmax"}))
_CAST = (frozenset({aten.to.dtype}), frozenset({"to", "type"}))
_DROPOUT = (frozenset({F.dropout, aten.dropout.default}), frozenset())
# torch.export's metadata checks read a value without using it; they go with the chain.
_CHECKS = frozenset({aten._assert_tensor_metadata.default})
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclasses.dataclass
class AttentionFusionStats:
    """What the pass did in this process (tests read it to see that it fired)."""

    fused: int = 0  # chains replaced by scaled_dot_product_attention
    autocast_casts: int = 0  # of those, chains whose float32 operands got autocast's casts written out
    declined: dict = dataclasses.field(default_factory=dict)  # reason -> chains left alone

    def reset(self) -> None:
        self.__init__()

    def decline(self, reason: str) -> None:
        self.declined[reason] = self.declined.get(reason, 0) + 1


STATS = AttentionFusionStats()


def _is(node: Any, kind: tuple) -> bool:
    if not isinstance(node, torch.fx.Node):
        return False
    functions, methods = kind
    return (node.op == "call_function" and node.target in functions) or (
        node.op == "call_method" and node.target in methods)


def _value(node: Any) -> Any:
    if not isinstance(node, torch.fx.Node):
        return None
    value = node.meta.get("example_value")  # dynamo's graphs
    return node.meta.get("val") if value is None else value  # torch.export's


def _arg(node: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if len(node.args) > index else default


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = [u for u in node.users if not (u.op == "call_function" and u.target in _CHECKS)]
    return users[0] if len(users) == 1 else None


def _same(a: Any, b: Any) -> bool:
    """Sizes equal for every value of their symbols (never adds a guard)."""
    if a is b:
        return True
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(a == b))


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclasses.dataclass
class _Chain:
    query: torch.fx.Node
    key: torch.fx.Node
    value: torch.fx.Node
    scores: torch.fx.Node  # the first matmul, Q @ K^T
    scale: float
    added: torch.fx.Node | None  # an additive mask
    filled: torch.fx.Node | None  # masked_fill's condition (True: the key is hidden)
    output: torch.fx.Node  # the second matmul
    nodes: list  # every node of the chain (replaced together)


def _last_two(dims: tuple, rank: int) -> bool:
    if len(dims) != 2 or not all(isinstance(d, int) for d in dims):
        return False
    return sorted(d % rank for d in dims) == [rank - 2, rank - 1]


def _hides(value: Any, dtype: torch.dtype) -> bool:
    """Whether masked_fill's value hides a key the way SDPA's keep mask does: -inf, or the dtype's
    minimum as HuggingFace and others write it (exp of it minus any finite maximum is 0)."""
    return _number(value) and (value == -math.inf or value <= torch.finfo(dtype).min)


class _Walk:
    """Follows the chain forward from ``scores = Q @ K^T`` one single-reader step at a time."""

    def __init__(self, scores: torch.fx.Node) -> None:
        self.node, self.nodes = scores, []

    def next(self) -> torch.fx.Node | None:
        return _only_user(self.node)

    def take(self, step: torch.fx.Node) -> None:
        self.nodes.append(step)
        self.node = step


def _match(scores: torch.fx.Node) -> tuple[_Chain | None, str | None]:
    """The chain that starts at ``scores = Q @ K^T``, or (None, why not) for a near miss; (None, None)
    when ``scores`` is not the start of an attention at all."""
    if not _is(scores, _MATMUL) or len(scores.args) != 2:
        return None, None
    query, key_t = scores.args
    if not _is(key_t, _TRANSPOSE) or len(key_t.args) < 3:
        return None, None
    key, dims = key_t.args[0], tuple(key_t.args[1:3])
    key_value = _value(key)
    if key_value is None or not _last_two(dims, key_value.dim()):
        return None, None
    walk = _Walk(scores)
    walk.nodes.append(key_t)
    walk.take(scores)
    scale, added, filled = 1.0, None, None
    step = walk.next()
    if _is(step, _MUL) or _is(step, _DIV):
        other = step.args[1] if step.args[0] is walk.node else step.args[0]
        if not _number(other) or other == 0:
            return None, "the scores are scaled by a tensor"
        if _is(step, _DIV) and (step.args[0] is not walk.node or step.kwargs.get("rounding_mode") is not None):
            return None, "the scores divide a value"
        scale = float(other) if _is(step, _MUL) else 1.0 / float(other)
        walk.take(step)
        step = walk.next()
    for _ in range(2):  # an added mask and a masked_fill, in either order
        if _is(step, _ADD) and added is None:
            if len(step.args) != 2 or step.kwargs.get("alpha", 1) != 1:
                return None, "the scores are added with alpha"
            added = step.args[1] if step.args[0] is walk.node else step.args[0]
            if not isinstance(added, torch.fx.Node):
                return None, "a constant is added to the scores"
        elif _is(step, _MASKED_FILL) and filled is None:
            dtype = _value(walk.node).dtype if _value(walk.node) is not None else torch.float32
            if step.args[0] is not walk.node or len(step.args) != 3 or not _hides(step.args[2], dtype):
                return None, "the scores are filled with a finite value"
            filled = step.args[1]
        else:
            break
        walk.take(step)
        step = walk.next()
    if step is None:
        return None, "the scores are read elsewhere"
    if not _is(step, _SOFTMAX):
        return None, None
    dim, rank = _arg(step, 1, "dim"), _value(walk.node).dim() if _value(walk.node) is not None else -1
    if not isinstance(dim, int) or rank < 0 or dim % rank != rank - 1:
        return None, "softmax over another dim"
    walk.take(step)
    step = walk.next()
    if step is not None and _is(step, _CAST):
        target = step.args[1] if len(step.args) == 2 and not step.kwargs else (
            step.kwargs.get("dtype") if len(step.args) == 1 and set(step.kwargs) == {"dtype"} else None)
        if not isinstance(target, torch.dtype):
            return None, "the probabilities are moved, not only cast"
        walk.take(step)
        step = walk.next()
    if step is not None and _is(step, _DROPOUT):
        p, training = _arg(step, 1, "p", 0.5), _arg(step, 2, "training", _arg(step, 2, "train", True))
        if _arg(step, 3, "inplace", False) or not _number(p) or not isinstance(training, bool):
            return None, "dropout with a non-constant probability"
        if training and p != 0:
            return None, "dropout in training (the fused kernel cannot replay torch's random stream)"
        walk.take(step)
        step = walk.next()
    if step is None:
        return None, "the probabilities are read elsewhere"
    if not _is(step, _MATMUL) or len(step.args) != 2 or step.args[0] is not walk.node:
        return None, None
    walk.take(step)
    return _Chain(query, key, step.args[1], scores, scale, added, filled, step, walk.nodes), None


_LOW = (torch.float16, torch.bfloat16)


def _autocast_dtype(chain: _Chain) -> torch.dtype | None:
    """The 16-bit dtype autocast provably cast the chain's float32 operands to, or None when the
    chain mixes no float32 with 16-bit operands (or the graph does not prove autocast did it).

    The proof is the recorded dtypes (dynamo's fake values, computed under the autocast state of the
    trace): a matmul of two float32 tensors, or of float32 and 16-bit, yields float32 by type
    promotion; only autocast's lower-precision cast of its operands makes it yield float16/bfloat16.
    So each matmul with a float32 operand must have recorded a 16-bit result, the same for both."""
    if "example_value" not in chain.output.meta:  # torch.export's graphs spell autocast differently
        return None
    q, k, v, scores, out = (_value(n) for n in (chain.query, chain.key, chain.value, chain.scores, chain.output))
    if any(t is None for t in (q, k, v, scores, out)):
        return None
    low = scores.dtype
    if low not in _LOW or out.dtype != low:
        return None
    if any(t.dtype not in (torch.float32, low) for t in (q, k, v)):
        return None
    if all(t.dtype == low for t in (q, k, v)):
        return None  # nothing to cast: the plain case
    # A float32 Q or K: Q @ K^T recorded `low`, proof for the first matmul. A float32 V: probs @ V
    # recorded `low` (checked above), proof for the second.
    return low


def _check(chain: _Chain, cast_to: torch.dtype | None = None) -> str | None:
    """Why the chain cannot become one fused attention, or None. `cast_to`: the dtype autocast cast
    Q, K and V to (_autocast_dtype), which the fused op then reads."""
    q, k, v, out = (_value(n) for n in (chain.query, chain.key, chain.value, chain.output))
    if any(t is None for t in (q, k, v, out)):
        return "shapes unknown"
    if any(t.dim() != 4 for t in (q, k, v)):
        return "query, key and value are not of rank 4"
    dq, dk, dv = (cast_to or t.dtype for t in (q, k, v))
    if dq not in _FLOATS or any(d != dq for d in (dk, dv, out.dtype)):
        return "query, key, value and output are not of one floating dtype"
    same = (_same(k.shape[0], q.shape[0]) and _same(v.shape[0], q.shape[0]) and _same(k.shape[1], q.shape[1])
            and _same(v.shape[1], q.shape[1]) and _same(k.shape[2], v.shape[2]) and _same(k.shape[3], q.shape[3]))
    if not same:
        return "query, key and value disagree in batch, heads, key length or head size"
    if chain.added is not None:
        m = _value(chain.added)
        widened = m is not None and m.dtype == torch.float32 and dq in _LOW
        if m is None or (m.dtype != dq and not widened) or m.dim() > 4:
            return "the mask is not a floating tensor of the query's dtype (or float32 for 16-bit queries)"
        if m.requires_grad:
            return "the mask requires grad (the fused kernel gives it none)"
    if chain.filled is not None:
        c = _value(chain.filled)
        if c is None or c.dtype != torch.bool or c.dim() > 4:
            return "masked_fill's condition is not a bool tensor of rank <= 4"
    return None


def _call(graph: torch.fx.Graph, aten_level: bool, torch_fn: Any, aten_fn: Any, args: tuple,
          kwargs: dict | None = None) -> torch.fx.Node:
    return graph.call_function(aten_fn if aten_level else torch_fn, args, kwargs or {})


def _attention_mask(graph: torch.fx.Graph, chain: _Chain, aten_level: bool) -> torch.fx.Node | None:
    """SDPA's attn_mask: the added mask; ~cond for a masked_fill; where(cond, -inf, mask) for both."""
    if chain.filled is None:
        return chain.added
    if chain.added is None:
        return _call(graph, aten_level, torch.logical_not, aten.logical_not.default, (chain.filled,))
    return _call(graph, aten_level, torch.where, aten.where.ScalarSelf, (chain.filled, -math.inf, chain.added))


def _set_value(node: torch.fx.Node, fn: Any, *args: Any, **kwargs: Any) -> None:
    """The new node's fake value, as dynamo (example_value) or torch.export (val) records it."""
    values = [a for a in args if isinstance(a, torch.Tensor)]
    mode = getattr(values[0], "fake_mode", None) if values else None
    if mode is None or any(getattr(t, "fake_mode", None) is not mode for t in values):
        return
    with mode:
        value = fn(*args, **kwargs)
    node.meta["val" if "val" in node.args[0].meta else "example_value"] = value


def _fake(node: Any) -> Any:
    return _value(node) if isinstance(node, torch.fx.Node) else node


def _cast(graph: torch.fx.Graph, node: torch.fx.Node, dtype: torch.dtype | None, made: dict) -> torch.fx.Node:
    """node.to(dtype) on dynamo's graph (autocast's cast written out), once per node; node itself
    when it already has that dtype or there is none to cast to."""
    if dtype is None or _value(node).dtype == dtype:
        return node
    if node not in made:
        made[node] = graph.call_method("to", (node, dtype))
        _set_value(made[node], torch.Tensor.to, _value(node), dtype)
    return made[node]


def _replace(gm: torch.fx.GraphModule, chain: _Chain, cast_to: torch.dtype | None = None) -> None:
    graph = gm.graph
    aten_level = isinstance(chain.output.target, torch._ops.OpOverload)
    with graph.inserting_before(chain.output):
        mask = _attention_mask(graph, chain, aten_level)
        if mask is not None and mask not in (chain.added,):
            _set_value(mask, mask.target, *(_fake(a) for a in mask.args))
        made: dict = {}
        args = tuple(_cast(graph, n, cast_to, made) for n in (chain.query, chain.key, chain.value))
        if aten_level:
            sdpa = graph.call_function(aten.scaled_dot_product_attention.default, (*args, mask, 0.0, False),
                                       {"scale": chain.scale})
        else:
            sdpa = graph.call_function(F.scaled_dot_product_attention, args,
                                       {"attn_mask": mask, "dropout_p": 0.0, "is_causal": False, "scale": chain.scale})
    _set_value(sdpa, F.scaled_dot_product_attention, *(_value(n) for n in args), attn_mask=_fake(mask),
               scale=chain.scale)
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
        if key in chain.output.meta:
            sdpa.meta[key] = chain.output.meta[key]
    chain.output.replace_all_uses_with(sdpa)
    for dead in reversed(chain.nodes):
        for check in [u for u in dead.users if u.op == "call_function" and u.target in _CHECKS]:
            graph.erase_node(check)
        if not dead.users:
            graph.erase_node(dead)


def fuse_eager_attention(gm: torch.fx.GraphModule) -> int:
    """Rewrites every eager-attention chain of ``gm`` (a TorchDynamo or torch.export graph) into
    scaled_dot_product_attention; returns how many. The graph is changed in place and recompiled when
    anything changed."""
    fused = 0
    for node in list(gm.graph.nodes):
        if getattr(node, "_erased", False) or node.op == "placeholder":
            continue
        chain, why = _match(node)
        if chain is None:
            if why is not None:
                STATS.decline(why)
            continue
        cast_to = _autocast_dtype(chain)
        why = _check(chain, cast_to)
        if why is not None:
            STATS.decline(why)
            continue
        _replace(gm, chain, cast_to)
        if cast_to is not None:
            STATS.autocast_casts += 1
        fused += 1
    if fused:
        gm.graph.lint()
        gm.recompile()
        STATS.fused += fused
    return fused
