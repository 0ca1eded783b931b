"""Values the backward rebuilds from what it reads anyway, instead of the forward stashing them: at
memory_opt_level >= 1 the partition with plans tags them for recompute before its second min-cut
(docs/memory_optimizer.md, "Values rebuilt for nothing" and "Rebuilt from what the backward reads").

- **Attention's dropped-out probabilities** (``rebuild_dropout_outputs``). ``native_dropout``
  returns ``input * mask * scale`` and its gradient reads the mask, so where the backward reads the
  output too (the gradient of the product with V) and the input as well (the softmax, which its own
  gradient reads), the forward saved all three. The output's backward reads are pointed at
  ``native_dropout_backward(input, mask, scale)``, tagged for recompute: the same multiplications on
  the same operands (the mask is 0 or 1, so ``(x * m) * s`` and ``x * (m * s)`` are equal bit for
  bit), [batch, heads, seq, seq] floats less stash per attention (16 MiB at the issue's size) for
  one elementwise pass. In a recomputed layer the dropout is replayed (rng_replay.py) for the
  product with V and its output's backward reads go to the rebuilt copy too, so the replayed output
  is not held through the layer's MLP backward.
- **Pointwise values** (``rebuild_elementwise_from_stash``): a value a few pointwise ops make from
  values stashed anyway and parameters (an RMSNorm's output from x and its rstd, SwiGLU's product
  from its two inputs, a tanh GELU's output from x and the tanh), in the layers no plan recomputes.

Tried and not kept: torch's min-cut with three of its Inductor-minded bans off
(``ban_recompute_materialized_backward``, ``_used_far_apart``, ``_long_fusible_chains``), which
also rebuilds elementwise values next to their stashed inputs, but everywhere its cost model
allows rather than only from values stashed anyway: the same step peak as the rebuilt
probabilities alone at the time, and GPT-2's step 10% more CPU time. The loss head's log-softmax
rebuilt from the logits the model returns (stashing the logits instead, and donating them to the
backward): no engine peak moved, because the forward's peak is at that log-softmax, whose output is
alive there whether stashed or not (the docs, "Rebuilt from what the backward reads").
"""

from __future__ import annotations

import operator

import torch
from torch.fx.node import map_arg
from torch.utils.checkpoint import CheckpointPolicy

aten = torch.ops.aten

def _outputs(node: torch.fx.Node) -> tuple[torch.fx.Node | None, torch.fx.Node | None]:
    out = mask = None
    for user in node.users:
        if user.target is operator.getitem:
            if user.args[1] == 0:
                out = user
            elif user.args[1] == 1:
                mask = user
    return out, mask


def _is_view(node: torch.fx.Node) -> bool:
    target = node.target
    return (node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and target.is_view
            and bool(node.args) and isinstance(node.args[0], torch.fx.Node))


def _backward_reads(out: torch.fx.Node, forward_readers: set) -> list:
    """(value, reader): reads of ``out`` or of a view of it by nodes the forward's outputs do not
    need (backward nodes, and views feeding only them)."""
    reads, stack = [], [out]
    while stack:
        v = stack.pop()
        for u in v.users:
            if u.op == "output":
                continue
            if u.name not in forward_readers:
                reads.append((v, u))
            elif _is_view(u) and u.args[0] is v:
                stack.append(u)
    return reads


def rebuild_dropout_outputs(joint: torch.fx.GraphModule, forward_readers: set) -> int:
    """Points the reads of each training dropout's output (or of its views) that the forward's
    outputs do not need (``forward_readers``: names of the nodes those are computed from) at a copy
    rebuilt from the dropout's input and mask (views replayed on it), tagged MUST_RECOMPUTE;
    returns how many dropouts it rebuilt. A dropout inside a recomputed layer is replayed for the
    forward's own readers (the product with V, run again for the layer's output), and its output's
    backward readers read the rebuilt copy too: the replayed output dies with that product instead
    of living through the layer's MLP backward, beside the softmax and the mask that the
    attention's backward reads anyway."""
    graph = joint.graph
    position = {n: i for i, n in enumerate(graph.nodes)}
    rebuilt = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.native_dropout.default:
            continue
        x, p = node.args[0], node.args[1]
        train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
        if train is False or not isinstance(p, float) or not 0.0 < p < 1.0:
            continue
        out, mask = _outputs(node)
        if out is None or mask is None or not isinstance(out.meta.get("val"), torch.Tensor):
            continue
        reads = _backward_reads(out, forward_readers)
        if not reads or not _backward_reads(x, forward_readers):
            # rebuilding pays only where the backward keeps the input anyway (a softmax, which its
            # own gradient reads); else it would stash the input in the output's place
            continue
        copies: dict = {}
        # the copies go just before the first reader: every value the views' arguments name (sizes
        # under dynamic shapes) is defined by then
        first = min((u for _, u in reads), key=position.get)

        def copy_of(v: torch.fx.Node) -> torch.fx.Node:
            if v not in copies:
                if v is out:
                    args, target, kwargs = (x, mask, 1.0 / (1.0 - p)), aten.native_dropout_backward.default, {}
                else:
                    args, target, kwargs = (copy_of(v.args[0]), *v.args[1:]), v.target, v.kwargs
                with graph.inserting_before(first):
                    c = graph.call_function(target, args, kwargs)
                val = v.meta["val"]
                with val.fake_mode if hasattr(val, "fake_mode") else torch.no_grad():
                    if v is out:
                        c.meta["val"] = torch.empty_like(val)
                    else:
                        meta_args, meta_kwargs = map_arg((args, kwargs), lambda n: n.meta["val"])
                        c.meta["val"] = target(*meta_args, **meta_kwargs)
                for key in ("nn_module_stack", "stack_trace"):
                    if key in v.meta:
                        c.meta[key] = v.meta[key]
                c.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
                c.meta["tob_memopt_tag"] = True
                copies[v] = c
            return copies[v]

        for v, u in reads:
            u.replace_input_with(v, copy_of(v))
        rebuilt += 1
    return rebuilt


# A longer chain (the tanh of a tanh GELU: 5 ops) makes the engine's rebuild write intermediates
# beside the values it rebuilds: GPT-2's backward peak rose 18 MiB when it was allowed (6 ops).
_MAX_ELEMENTWISE_OPS = 3


def _elementwise_chain(value: torch.fx.Node, kept: set) -> list | None:
    """The pointwise ops (and views) that rebuild ``value`` from values in ``kept`` (alias roots)
    and graph inputs alone; None when it needs anything else."""
    from .analysis import alias_root, is_free, is_random

    chain: list = []
    stack = [value]
    while stack:
        v = stack.pop()
        if v in chain:
            continue
        if v is not value and (v.op == "placeholder" or alias_root(v) in kept):
            continue
        if isinstance(v.meta.get("val"), torch.SymInt):
            continue
        if v.op != "call_function" or not isinstance(v.target, torch._ops.OpOverload) or is_random(v):
            return None
        if v.meta.get("recompute") is not None and v.meta.get("recompute") != CheckpointPolicy.MUST_RECOMPUTE:
            return None
        if not (is_free(v) or torch.Tag.pointwise in v.target.tags) or v.target._schema.is_mutable:
            return None
        chain.append(v)
        if sum(1 for c in chain if not is_free(c)) > _MAX_ELEMENTWISE_OPS:
            return None
        stack.extend(v.all_input_nodes)
    return chain


def rebuild_elementwise_from_stash(joint: torch.fx.GraphModule, saved_names: set, num_fwd_outputs: int) -> int:
    """Tags for recompute each value the forward would stash (its name in ``saved_names``, the
    level-0 partition's saved values) that at most _MAX_ELEMENTWISE_OPS pointwise ops make from
    values that stay stashed (a value rebuilt here is not the source of another),
    graph inputs and parameters alone: an RMSNorm's output (x and its rstd are stashed for the
    norm's backward; the weight is a parameter), SwiGLU's product (its two inputs are stashed for
    its gradient), a tanh GELU's output (from x and the tanh, which the GELU's gradient reads;
    the tanh itself takes 5 ops from x and stays stashed). The backward runs the same ops on the
    same values again, just before its reader (the next product's weight gradient), where the
    engine fuses them into one elementwise pass; the forward stashes one tensor less. Nodes a layer
    plan tags are left to it. Returns how many values it tagged."""
    from .analysis import alias_root

    graph = joint.graph
    output = next(iter(graph.find_nodes(op="output")))
    outputs = {alias_root(n) for n in output.args[0][:num_fwd_outputs] if isinstance(n, torch.fx.Node)}
    kept = outputs | {alias_root(n) for n in graph.nodes if n.name in saved_names}
    tagged = 0
    for node in graph.nodes:
        if node.name not in saved_names or node.op != "call_function" or node in outputs:
            continue
        if node.meta.get("recompute") is not None or alias_root(node) is not node:
            continue
        chain = _elementwise_chain(node, kept - {node})
        if chain is None:
            continue
        for n in chain:
            if n.meta.get("recompute") is None:
                n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
                n.meta["tob_memopt_tag"] = True
        kept.discard(node)  # no longer stashed: a later value is not rebuilt from it
        tagged += 1
    return tagged


__all__ = ["rebuild_dropout_outputs", "rebuild_elementwise_from_stash"]
