"""Label sparsity: a cross-entropy loss, and the per-token layers that only feed it, computed over the
rows whose label is not the ignore index.

Padded batches label their padding (and, for masked LMs, every unmasked token) with the ignore index:
those rows add nothing to the loss nor to any gradient, yet the vocabulary projection and the
log-softmax over the vocabulary cost the most of a language model's head. The pass rewrites
TorchDynamo's graph, before AOTAutograd derives the backward from it:

    loss = cross_entropy(head(h).view(-1, V), labels, ignore_index=i, reduction=r)
 ->
    rows = nonzero(labels != i).view(-1)
    loss = cross_entropy(head(h.flatten(0, -2).index_select(0, rows)), labels.index_select(0, rows), ...)

``head`` is the chain of row-wise ops (row_ops.py) between the loss and the last node whose full
value something else needs: each op of the chain must be read by the next one only. So when the
model also returns its logits (HuggingFace models given labels do), the logits are still computed
for every row and only the loss's log-softmax runs on the selected rows, which is where
onnxruntime-training's InsertGatherBeforeSceLoss put its ShrunkenGather; when only the loss leaves
the graph (a module returning ``output.loss``, optimum's ModuleWithLoss), the selection moves above
the vocabulary projection and the head's other per-token layers, as its upstream-gather passes did.

Same numbers: the selected rows are exactly those the loss counts (the mean's denominator is the
count of valid labels either way, class weights are per class), and AOTAutograd differentiates the
rewritten graph, so the gradient of index_select scatters each row's gradient back to its place and
the unselected rows get zeros, as the ignore index gave them. The row count is data-dependent: an
unbacked SymInt while tracing, a symbolic dimension in the exported model, a plain size at run time.

Only ``mean`` and ``sum`` reductions (``none`` returns one loss per row, padding included), hard
labels of shape [N] against logits [N, C], and no label smoothing are rewritten.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import torch.fx
import torch.nn.functional as F

from .row_ops import RowOp, classify, example

_CROSS_ENTROPY = F.cross_entropy
_SIGNATURE = inspect.signature(F.cross_entropy)


@dataclass(frozen=True)
class LabelRewrite:
    """One cross-entropy the pass rewrote: its node, the node whose rows it selects, and the compute
    ops (by target name) that now run on the selected rows only."""

    loss: str
    selected_from: str
    moved_ops: tuple[str, ...]


def bound_cross_entropy(args: tuple, kwargs: dict) -> dict | None:
    """cross_entropy's arguments by name, defaults filled in (None when they do not bind)."""
    try:
        bound = _SIGNATURE.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


def selectable(a: dict, logits: torch.Tensor | None, labels: torch.Tensor | None,
               weight: torch.Tensor | None) -> bool:
    """Whether a cross_entropy call with arguments `a` (and these tensors, or their fake values) may
    run over the valid labels' rows only with the same result (module docstring)."""
    if logits is None or labels is None or logits.dim() != 2 or labels.dim() != 1:
        return False
    if not logits.dtype.is_floating_point or labels.dtype not in (torch.int64, torch.int32):
        return False
    if a["size_average"] is not None or a["reduce"] is not None or a["reduction"] not in ("mean", "sum"):
        return False
    if not isinstance(a["ignore_index"], int) or a["label_smoothing"] != 0.0:
        return False
    return a["weight"] is None or (weight is not None and weight.dim() == 1)


def _loss_arguments(node: torch.fx.Node) -> dict | None:
    """cross_entropy's arguments by name when the call is one the pass may rewrite (module docstring)."""
    a = bound_cross_entropy(node.args, node.kwargs)
    if a is None or not selectable(a, example(a["input"]), example(a["target"]), example(a["weight"])):
        return None
    return a


def _head(logits: torch.fx.Node) -> tuple[torch.fx.Node, list[RowOp]]:
    """(the node whose rows to select, the row-wise ops from it down to the loss's input, last first)."""
    chain: list[RowOp] = []
    node = logits
    while len(node.users) == 1:
        op = classify(node)
        if op is None:
            break
        chain.append(op)
        node = op.primary
    return node, chain


def _name(op: RowOp) -> str:
    target = op.node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def has_losses(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph calls cross_entropy at all (the pass has nothing to look at otherwise)."""
    return any(n.op == "call_function" and n.target is _CROSS_ENTROPY for n in gm.graph.nodes)


def rewrite_label_sparsity(gm: torch.fx.GraphModule) -> list[LabelRewrite]:
    """Rewrites every eligible cross-entropy of dynamo's graph in place; returns what it did."""
    graph = gm.graph
    done: list[LabelRewrite] = []
    for loss in [n for n in graph.nodes if n.op == "call_function" and n.target is _CROSS_ENTROPY]:
        args = _loss_arguments(loss)
        if args is None:
            continue
        logits, labels = args["input"], args["target"]
        source, chain = _head(logits)
        with graph.inserting_before(loss):
            valid = graph.call_function(torch.ne, (labels, args["ignore_index"]))
            rows = graph.call_method("view", (graph.call_function(torch.nonzero, (valid,)), -1))
            selected_labels = graph.call_function(torch.index_select, (labels, 0, rows))
            flat = graph.call_method("flatten", (source, 0, -2))
            value = graph.call_function(torch.index_select, (flat, 0, rows))
            for op in reversed(chain):
                if op.layout:  # on flattened rows a regrouping of the leading dimensions is the identity
                    continue
                value = graph.node_copy(op.node, lambda n, op=op, value=value: value if n is op.primary else n)
                value.meta.pop("example_value", None)  # the copy's rows are the selected ones
        loss.replace_input_with(logits, value)
        loss.replace_input_with(labels, selected_labels)
        for op in chain:  # each was read only by the next one, so the chain is dead now
            if not op.node.users:
                graph.erase_node(op.node)
        done.append(LabelRewrite(loss.name, source.name, tuple(_name(op) for op in reversed(chain) if not op.layout)))
    if done:
        graph.lint()
        gm.recompile()
    return done


__all__ = ["LabelRewrite", "has_losses", "rewrite_label_sparsity"]
