"""Attention's dropped-out probabilities, rebuilt in the backward instead of stashed: at
memory_opt_level >= 1 the partition with plans does not keep them (docs/memory_optimizer.md,
"Values rebuilt for nothing").

``native_dropout`` returns ``input * mask * scale`` and its gradient reads the mask, so where the
backward reads the output too (the dropped-out probabilities, read by the gradient of the product
with V) and the input as well (the softmax, which its own gradient reads), the forward saved all
three. ``rebuild_dropout_outputs`` points the output's backward reads at
``native_dropout_backward(input, mask, scale)``, tagged for recompute: the same multiplications on
the same operands (the mask is 0 or 1, so ``(x * m) * s`` and ``x * (m * s)`` are equal bit for
bit), [batch, heads, seq, seq] floats less stash per attention (16 MiB at the issue's size) for one
elementwise pass. Dropouts inside a recomputed layer replay their random numbers instead
(rng_replay.py).

Tried and not kept: torch's min-cut with three of its Inductor-minded bans off
(``ban_recompute_materialized_backward``, ``_used_far_apart``, ``_long_fusible_chains``), which
also rebuilds elementwise values next to their stashed inputs (GPT-2's GELU output and tanh,
LLaMA's SwiGLU product and RMSNorm outputs): 22-32 MiB less stash at the issue's size, but the
same step peak as the rebuilt probabilities alone (the peak is then in a recomputed layer's
backward) and GPT-2's step 10% more CPU time.
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
    returns how many dropouts it rebuilt. Dropouts already tagged for recompute (inside a
    recomputed layer) are left to their replay."""
    graph = joint.graph
    position = {n: i for i, n in enumerate(graph.nodes)}
    rebuilt = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.native_dropout.default:
            continue
        if node.meta.get("recompute") == CheckpointPolicy.MUST_RECOMPUTE:
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


__all__ = ["rebuild_dropout_outputs"]
