"""Attention written out as matmul / softmax / matmul, fused into one scaled-dot-product attention.

HuggingFace's "eager" attention (``eager_attention_forward`` of transformers 5, and the same shape in
older models and hand-written transformers) computes

    scores = (Q @ K.transpose(-2, -1)) * scale [+ mask]
    probs = softmax(scores, dim=-1 [, dtype]) [.to(V.dtype)] [dropout]
    out = probs @ V

TorchDynamo's graph holds that chain op by op, so the engine ran two batched GEMMs, a softmax and
their gradients, and the forward saved the [batch, heads, q_len, kv_len] probabilities for the
backward. ``fuse_eager_attention`` replaces each chain by ``F.scaled_dot_product_attention(Q, K, V,
attn_mask=mask, scale=scale)`` on dynamo's graph, before AOTAutograd (like the compute optimizer:
the gradient then comes from AOTAutograd), which the exporter maps to the engine's flash-tiled
``FlashAttention`` / ``FlashAttentionGrad`` (exporter/ops_training_attention.py): the score matrix
is never materialised and the backward saves only the output and the row logsumexp.

The function computed is the same; only float rounding differs (the fused kernel keeps the scores
in float32 and sums in another order). A chain is left alone whenever the fused op would compute
something else or lose information:
- dropout with p > 0 in training (the engine's kernel cannot replay torch's generator stream, so
  the masks, and the numbers the user asked for, would differ);
- a mask that is not a floating tensor of the query's dtype, or float32 for float16/bfloat16
  queries as under autocast (a bool tensor *added* to the scores is arithmetic, not a keep-mask)
  or that requires grad (T5's learned position bias: the fused
  kernel gives the mask no gradient);
- any intermediate (scores, probabilities) read elsewhere, e.g. returned with
  output_attentions=True;
- Q, K, V not of rank 4 with equal batch and head sizes and one floating dtype.

ORTMODULE_USE_EFFICIENT_ATTENTION (option ``use_efficient_attention``) switches it, as in
onnxruntime-training; unlike there it is on by default, because the fused kernel is the engine's own
and exact to rounding (docs/torch_compile.md, "Attention").
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

_MATMUL = (frozenset({torch.matmul, operator.matmul}), frozenset({"matmul", "__matmul__"}))
_TRANSPOSE = (frozenset({torch.transpose}), frozenset({"transpose"}))
_MUL = (frozenset({operator.mul, torch.mul}), frozenset({"mul", "__mul__"}))
_DIV = (frozenset({operator.truediv, torch.div, torch.true_divide}), frozenset({"div", "__truediv__"}))
_ADD = (frozenset({operator.add, torch.add}), frozenset({"add", "__add__"}))
_SOFTMAX = (frozenset({F.softmax, torch.softmax}), frozenset({"softmax"}))
_CAST = (frozenset(), frozenset({"to", "type"}))
_DROPOUT = (frozenset({F.dropout}), frozenset())
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclasses.dataclass
class AttentionFusionStats:
    """What the pass did in this process (tests read it to see that it fired)."""

    fused: int = 0  # chains replaced by scaled_dot_product_attention
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
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def _arg(node: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if len(node.args) > index else default


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _same(a: Any, b: Any) -> bool:
    """Sizes equal for every value of their symbols (never adds a guard)."""
    if a is b:
        return True
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(a == b))


@dataclasses.dataclass
class _Chain:
    query: torch.fx.Node
    key: torch.fx.Node
    value: torch.fx.Node
    mask: torch.fx.Node | None
    scale: float
    output: torch.fx.Node  # the second matmul
    nodes: list  # every node of the chain, in graph order (replaced together)


def _last_two(dims: tuple, rank: int) -> bool:
    if len(dims) != 2 or not all(isinstance(d, int) for d in dims):
        return False
    return sorted(d % rank for d in dims) == [rank - 2, rank - 1]


def _match(scores: torch.fx.Node) -> tuple[_Chain | None, str | None]:
    """The chain that starts at ``scores = Q @ K^T``, or (None, why not) for a near miss; (None, None)
    when ``scores`` is not the start of an attention at all."""
    if not _is(scores, _MATMUL) or len(scores.args) != 2:
        return None, None
    query, key_t = scores.args
    if not _is(key_t, _TRANSPOSE):
        return None, None
    key = key_t.args[0] if key_t.op == "call_method" else _arg(key_t, 0, "input")
    dims = tuple(key_t.args[1:3]) if len(key_t.args) >= 3 else (_arg(key_t, 1, "dim0"), _arg(key_t, 2, "dim1"))
    key_value = _value(key)
    if key_value is None or not _last_two(dims, key_value.dim()):
        return None, None
    nodes = [key_t, scores]
    node, scale, mask = scores, 1.0, None
    step = _only_user(node)
    if step is None:
        return None, "the scores are read elsewhere"
    if _is(step, _MUL) or _is(step, _DIV):
        other = step.args[1] if step.args[0] is node else step.args[0]
        if not isinstance(other, (int, float)) or isinstance(other, bool) or other == 0:
            return None, "the scores are scaled by a tensor"
        if _is(step, _DIV) and (step.args[0] is not node or step.kwargs.get("rounding_mode") is not None):
            return None, "the scores divide a value"
        scale = float(other) if _is(step, _MUL) else 1.0 / float(other)
        nodes.append(step)
        node, step = step, _only_user(step)
        if step is None:
            return None, "the scaled scores are read elsewhere"
    if _is(step, _ADD):
        if len(step.args) != 2 or step.kwargs.get("alpha", 1) != 1:
            return None, "the scores are added with alpha"
        mask = step.args[1] if step.args[0] is node else step.args[0]
        if not isinstance(mask, torch.fx.Node):
            return None, "a constant is added to the scores"
        nodes.append(step)
        node, step = step, _only_user(step)
        if step is None:
            return None, "the masked scores are read elsewhere"
    if not _is(step, _SOFTMAX):
        return None, None
    dim = _arg(step, 1, "dim")
    rank = _value(node).dim() if _value(node) is not None else -1
    if not isinstance(dim, int) or rank < 0 or dim % rank != rank - 1:
        return None, "softmax over another dim"
    nodes.append(step)
    node, step = step, _only_user(step)
    if step is not None and _is(step, _CAST):
        target = step.args[1] if len(step.args) == 2 and not step.kwargs else (
            step.kwargs.get("dtype") if len(step.args) == 1 and set(step.kwargs) == {"dtype"} else None)
        if not isinstance(target, torch.dtype):
            return None, "the probabilities are moved, not only cast"
        nodes.append(step)
        node, step = step, _only_user(step)
    if step is not None and _is(step, _DROPOUT):
        p, training = _arg(step, 1, "p", 0.5), _arg(step, 2, "training", True)
        if _arg(step, 3, "inplace", False) or not isinstance(p, (int, float)) or not isinstance(training, bool):
            return None, "dropout with a non-constant probability"
        if training and p != 0:
            return None, "dropout in training (the fused kernel cannot replay torch's random stream)"
        nodes.append(step)
        node, step = step, _only_user(step)
    if step is None:
        return None, "the probabilities are read elsewhere"
    if not _is(step, _MATMUL) or len(step.args) != 2 or step.args[0] is not node:
        return None, None
    nodes.append(step)
    return _Chain(query, key, step.args[1], mask, scale, step, nodes), None


def _check(chain: _Chain) -> str | None:
    """Why the chain cannot become one fused attention, or None."""
    q, k, v, out = (_value(n) for n in (chain.query, chain.key, chain.value, chain.output))
    if any(t is None for t in (q, k, v, out)):
        return "shapes unknown"
    if any(t.dim() != 4 for t in (q, k, v)):
        return "query, key and value are not of rank 4"
    if q.dtype not in _FLOATS or any(t.dtype != q.dtype for t in (k, v, out)):
        return "query, key, value and output are not of one floating dtype"
    same = (_same(k.shape[0], q.shape[0]) and _same(v.shape[0], q.shape[0]) and _same(k.shape[1], q.shape[1])
            and _same(v.shape[1], q.shape[1]) and _same(k.shape[2], v.shape[2]) and _same(k.shape[3], q.shape[3]))
    if not same:
        return "query, key and value disagree in batch, heads, key length or head size"
    if chain.mask is not None:
        m = _value(chain.mask)
        widened = m is not None and m.dtype == torch.float32 and q.dtype in (torch.float16, torch.bfloat16)
        if m is None or (m.dtype != q.dtype and not widened) or m.dim() > 4:
            return "the mask is not a floating tensor of the query's dtype (or float32 for 16-bit queries)"
        if m.requires_grad:
            return "the mask requires grad (the fused kernel gives it none)"
    return None


def fuse_eager_attention(gm: torch.fx.GraphModule) -> int:
    """Rewrites every eager-attention chain of ``gm`` into scaled_dot_product_attention; returns
    how many. The graph is changed in place and recompiled when anything changed."""
    fused = 0
    for node in list(gm.graph.nodes):
        if node.graph is not gm.graph or node.op == "placeholder":
            continue
        chain, why = _match(node)
        if chain is None:
            if why is not None:
                STATS.decline(why)
            continue
        why = _check(chain)
        if why is not None:
            STATS.decline(why)
            continue
        kwargs = {"attn_mask": chain.mask, "dropout_p": 0.0, "is_causal": False, "scale": chain.scale}
        with gm.graph.inserting_before(chain.output):
            sdpa = gm.graph.call_function(F.scaled_dot_product_attention, (chain.query, chain.key, chain.value), kwargs)
        example = [_value(n) for n in (chain.query, chain.key, chain.value, chain.mask) if n is not None]
        mode = getattr(example[0], "fake_mode", None)  # the mode of dynamo's example values
        if mode is not None and all(getattr(t, "fake_mode", None) is mode for t in example):
            q, k, v = example[:3]
            with mode:
                sdpa.meta["example_value"] = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=example[3] if chain.mask is not None else None, scale=chain.scale)
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in chain.output.meta:
                sdpa.meta[key] = chain.output.meta[key]
        chain.output.replace_all_uses_with(sdpa)
        for dead in reversed(chain.nodes):
            if not dead.users:
                gm.graph.erase_node(dead)
        fused += 1
    if fused:
        gm.graph.lint()
        gm.recompile()
        STATS.fused += fused
    return fused
