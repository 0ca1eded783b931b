"""Recompute inside one joint forward + backward graph: ORTTrainer's graph_transformer flags.

ORTTrainer runs the forward, the loss and the gradients as one graph (trainer/training_graph.py), not
AOTAutograd's forward/backward pair, so there is no partition to tag: a forward value that a
backward node reads lives from the forward until that read. A recompute plan here copies the
forward nodes that rebuild such values, places the copies just before the backward's first read
and points the backward's reads at them, so the forward's values die inside the forward. The
copies carry the engine's recompute mark (graph_exporter.RECOMPUTE_META: the engine's CSE never
merges them back), and the engine runs nodes in the graph's order, so a copy runs where it stands.

The flags, as onnxruntime-training had them, onto the report's plans:

- ``attn_dropout_recompute`` -> ``Dropout+``: each dropout of an attention's softmax. The output
  is rebuilt from the dropout's input and its mask, which the backward keeps anyway, with the
  dropout's own gradient op (input * mask * scale, as onnxruntime rebuilt it with DropoutGrad): no
  random numbers are drawn again, and the values are the forward's bit for bit.
- ``gelu_recompute`` -> the GELU plan (``Gelu+``, or the ops of the tanh form): each GELU rebuilt
  from its input (gelu_regions).

- ``transformer_layer_recompute`` -> ``TransformerLayer``: every value of a transformer layer but
  the layer's outputs (values later layers read), rebuilt from what enters the layer (a dropout
  inside from its mask, as above). The joint graph carries no nn_module_stack (torch.export's joint
  decomposition empties it), so layers are found as onnxruntime-training found them, between layer
  norms (transformer_layers). ``number_recompute_layers`` N > 0 recomputes the first N layers, 0
  every layer but the last (whose backward runs right after its forward: nothing to free); N is
  clipped to that with a warning, as onnxruntime-training did.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass

import torch

from ..exporter.graph_exporter import RECOMPUTE_META
from .analysis import Candidates, Occurrence, activation_of, alias_root, layer_outputs, recomputable
from .cluster_names import ATTENTION_OPS, is_free, packet
from .partition import Selection
from .plans import LAYER_PLAN, RECOMPUTE, PlanConfig
from .report import format_report

aten = torch.ops.aten
logger = logging.getLogger("torch_ort_backend")

DROPOUT_PLAN = "Dropout+"


@dataclass(frozen=True)
class RecomputeFlags:
    """ORTTrainerOptions.graph_transformer's recompute settings."""

    attn_dropout: bool = False
    gelu: bool = False
    transformer_layers: bool = False
    number_layers: int = 0

    def any(self) -> bool:
        return self.attn_dropout or self.gelu or self.transformer_layers


@dataclass
class JointRecomputeResult:
    """What the rewrite did: the plans applied (for the report and the tests) and the stash."""

    selection: Selection
    candidates: Candidates
    stashed_before: int
    stashed_after: int
    copies: int


def forward_nodes(graph: torch.fx.Graph, forward_outputs: list) -> set:
    """The forward of a joint graph: the nodes up to the last one that the non-gradient outputs
    (loss, model outputs, buffer updates) depend on. The joint graph is traced forward first, so
    this also holds the forward's values that only the backward reads (a dropout's mask, a layer
    norm's statistics); everything after it is the backward, seeded by the loss's gradient."""
    seen: set = set()
    stack = [n for n in forward_outputs if isinstance(n, torch.fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    nodes = list(graph.nodes)
    last = max((i for i, n in enumerate(nodes) if n in seen), default=-1)
    return {n for n in nodes[:last + 1] if n.op == "call_function"}


def stashed_roots(graph: torch.fx.Graph, forward: set) -> set:
    """Forward values a non-forward node reads (through views): alive from the forward to the
    backward."""
    roots = set()
    for n in graph.nodes:
        if n.op != "call_function" or n in forward:
            continue
        for u in n.all_input_nodes:
            if u in forward:
                roots.add(alias_root(u))
    return {r for r in roots if r.op == "call_function"}


def _bytes(roots: set) -> int:
    return sum(a.nbytes for a in (activation_of(r) for r in roots) if a is not None)


def _is_dropout(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and packet(node.target) is aten.native_dropout


def _dropout_mask(dropout: torch.fx.Node) -> torch.fx.Node | None:
    return next((u for u in dropout.users if u.target is operator.getitem and u.args[1] == 1), None)


def _through_free_and_casts(node: torch.fx.Node) -> torch.fx.Node:
    while node.op == "call_function" and (is_free(node) or packet(node.target) is aten._to_copy) and node.args:
        if not isinstance(node.args[0], torch.fx.Node):
            break
        node = node.args[0]
    return node


def attention_dropouts(forward_order: list) -> list:
    """[dropout node, its getitems]: dropouts (train mode) of an attention's softmax."""
    found = []
    for n in forward_order:
        if not _is_dropout(n) or n.args[2:3] == (False,):
            continue
        source = _through_free_and_casts(n.args[0])
        if source.op == "call_function" and packet(source.target) is aten._softmax:
            found.append([n, *[u for u in n.users if u.target is operator.getitem]])
    return found


MAX_GELU_OPS = 24


def _pointwise(n: torch.fx.Node) -> bool:
    target = n.target
    return (n.op == "call_function" and isinstance(target, torch._ops.OpOverload)
            and torch.Tag.pointwise in target.tags and torch.Tag.nondeterministic_seeded not in target.tags)


def _elementwise_around(seed: torch.fx.Node, forward: dict) -> set:
    """`seed` and the elementwise forward ops connected to it, up to the first op that is not
    elementwise (a GELU's tanh form is such a chain between two matrix products)."""
    region, stack = {seed}, [seed]
    while stack and len(region) <= MAX_GELU_OPS:
        n = stack.pop()
        for m in list(n.all_input_nodes) + list(n.users):
            if m not in region and m in forward and _pointwise(m):
                region.add(m)
                stack.append(m)
    return region


def _is_cube(n: torch.fx.Node) -> bool:
    return packet(n.target) is aten.pow and len(n.args) > 1 and n.args[1] == 3


def gelu_regions(forward_order: list) -> list:
    """Each GELU, forward order: a gelu op, or the tanh approximation written in elementwise ops
    (HuggingFace's NewGELUActivation: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))),
    found as a tanh whose elementwise neighbourhood holds the cube. torch.export's joint
    decomposition leaves no nn_module_stack to find a GELU module by."""
    position = {n: i for i, n in enumerate(forward_order)}
    regions, taken = [], set()
    for seed in forward_order:
        if seed in taken or packet(seed.target) not in (aten.gelu, aten.tanh):
            continue
        region = _elementwise_around(seed, position) if _pointwise(seed) else {seed}
        if packet(seed.target) is aten.tanh and not any(_is_cube(n) for n in region):
            continue
        taken |= region
        regions.append(sorted(region, key=position.get))
    return regions


def _rms_norm_start(n: torch.fx.Node) -> torch.fx.Node | None:
    """The first op of a decomposed RMSNorm (LLaMA's: x * rsqrt(mean(x^2) + eps)) whose rsqrt is
    `n`: the square, reached back through the add and the mean; None when `n` is not one."""
    if packet(n.target) is not aten.rsqrt or not n.all_input_nodes:
        return None
    node = n.all_input_nodes[0]
    if packet(node.target) is aten.add and node.all_input_nodes:
        node = node.all_input_nodes[0]
    if packet(node.target) is not aten.mean or not node.all_input_nodes:
        return None
    node = node.all_input_nodes[0]
    squares = packet(node.target) is aten.pow and len(node.args) > 1 and node.args[1] == 2
    squares = squares or (packet(node.target) is aten.mul and len(node.args) > 1 and node.args[0] is node.args[1])
    return node if squares else None


def _norm_positions(forward_order: list) -> list:
    """Positions of the forward's layer norms: native_layer_norm nodes, and the first op of each
    decomposed RMSNorm (torch.export's joint decomposition leaves LLaMA's as elementwise ops)."""
    position = {n: i for i, n in enumerate(forward_order)}
    found = set()
    for i, n in enumerate(forward_order):
        if packet(n.target) is aten.native_layer_norm:
            found.add(i)
        elif (start := _rms_norm_start(n)) is not None and start in position:
            found.add(position[start])
    return sorted(found)


def transformer_layers(forward_order: list) -> list:
    """The transformer layers of a joint graph's forward, in order: one per attention (softmax or
    scaled-dot-product attention), each starting at the last layer norm (LayerNorm or RMSNorm)
    before its attention and after the previous layer's start (a pre-norm layer's first norm; a
    post-norm layer begins at the previous layer's closing norm, which reads the residual sum). []
    when an attention has no norm before it. The last layer runs to the end of the forward (it is
    never recomputed)."""
    norms = _norm_positions(forward_order)
    starts: list = []
    for i, n in enumerate(forward_order):
        if packet(n.target) not in ATTENTION_OPS:
            continue
        before = [k for k in norms if k < i and (not starts or k > starts[-1])]
        if not before:
            return []
        starts.append(before[-1])
    return [forward_order[a:b] for a, b in zip(starts, starts[1:] + [len(forward_order)])]


def _select_layers(layers: list, flags: RecomputeFlags) -> list:
    limit = len(layers) - 1
    if flags.number_layers > limit:
        logger.warning("ORTTrainer: graph_transformer.number_recompute_layers=%d is more than the %d layers that can "
                       "be recomputed (every layer but the last of %d); recomputing %d",
                       flags.number_layers, limit, len(layers), limit)
    return layers[:min(flags.number_layers, limit) if flags.number_layers > 0 else limit]


def gelu_plan_name(region: list) -> str:
    names = []
    from .cluster_names import op_name

    for n in region:
        if n.op == "call_function" and not is_free(n):
            names.append(op_name(n.target))
    return "+".join(names) + "+"


class _Rewriter:
    """Copies regions of forward nodes for the backward's reads (one region at a time)."""

    def __init__(self, gm: torch.fx.GraphModule, forward: set) -> None:
        self.gm = gm
        self.graph = gm.graph
        self.forward = forward
        self.copies: set = set()
        self.position = {n: i for i, n in enumerate(self.graph.nodes)}

    def _backward_readers(self, node: torch.fx.Node) -> list:
        return [u for u in node.users if u not in self.forward and u not in self.copies and u.op != "output"]

    def _extend(self, region: list, keep: set) -> list:
        """The region with its getitems and the forward views of its values (a view the backward
        reads keeps its base alive); `keep` are nodes whose values stay (not copied)."""
        members = set(region)
        changed = True
        while changed:
            changed = False
            for n in list(members):
                for u in n.users:
                    if u in members or u not in self.forward:
                        continue
                    if u.target is operator.getitem or (is_free(u) and alias_root(u) in members - keep):
                        members.add(u)
                        changed = True
        return sorted(members, key=self.position.get)

    def recompute(self, region: list, keep: set = frozenset()) -> set:
        """Copies what the backward reads of `region` (but `keep`); returns the stashed roots freed
        (region values the backward no longer reads)."""
        region = self._extend(region, set(keep))
        members = set(region)
        readers = {n: self._backward_readers(n) for n in region if n not in keep}
        needed = self._needed([n for n, r in readers.items() if r], members, keep)
        # Only the reads that move decide where the copies go: the first of them.
        moved = {n: r for n, r in readers.items() if r and n in needed}
        if not moved:
            return set()
        anchor = min((u for rs in moved.values() for u in rs), key=self.position.get)
        mapping: dict = {}
        with self.graph.inserting_before(anchor):
            for n in region:
                if n in needed:
                    mapping[n] = self._copy(n, mapping)
        for n, rs in moved.items():
            for u in rs:
                u.replace_input_with(n, mapping[n])
        # A value is freed when no backward node reads it any more (its views included).
        freed = {alias_root(n) for n in moved}
        still_read = {alias_root(n) for n in region if self._backward_readers(n)}
        return {r for r in freed - still_read if r in members}

    def _needed(self, readers: list, members: set, keep: set) -> set:
        """Region nodes that rebuild the values the backward reads (a dropout is not run again)."""
        needed: set = set()
        stack = list(readers)
        while stack:
            n = stack.pop()
            if n in needed or n not in members or n in keep or not self._copyable(n):
                continue
            needed.add(n)
            if n.target is operator.getitem and _is_dropout(n.args[0]):
                stack.append(n.args[0].args[0])  # the dropout's input; its mask stays
                continue
            stack.extend(n.all_input_nodes)
        return needed

    def _copyable(self, n: torch.fx.Node) -> bool:
        if n.target is operator.getitem and _is_dropout(n.args[0]):
            # The output, rebuilt from the mask (the mask itself stays).
            return n.args[1] == 0 and _dropout_mask(n.args[0]) is not None
        if _is_dropout(n):
            return False
        return recomputable(n)

    def _copy(self, n: torch.fx.Node, mapping: dict) -> torch.fx.Node:
        if n.target is operator.getitem and _is_dropout(n.args[0]):
            dropout = n.args[0]
            source, p = dropout.args[0], float(dropout.args[1])
            mask = _dropout_mask(dropout)
            scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
            new = self.graph.call_function(aten.native_dropout_backward.default,
                                           (mapping.get(source, source), mask, scale))
            new.meta = {k: v for k, v in n.meta.items() if k in ("val", "tensor_meta", "nn_module_stack")}
        else:
            new = self.graph.node_copy(n, lambda a: mapping.get(a, a))
        new.meta[RECOMPUTE_META] = True
        self.copies.add(new)
        return new


def recompute_joint_graph(gm: torch.fx.GraphModule, forward_outputs: list, flags: RecomputeFlags) -> JointRecomputeResult:
    """Applies the flags to the joint graph `gm` in place (forward_outputs: the values of its
    non-gradient outputs) and logs the Memory Optimizer report at INFO; a flag whose plan the graph
    does not have is a warning naming it."""
    graph = gm.graph
    forward = forward_nodes(graph, forward_outputs)
    order = [n for n in graph.nodes if n in forward]
    before_roots = stashed_roots(graph, forward)
    rewriter = _Rewriter(gm, forward)
    cands = Candidates(stashed=[a for a in (activation_of(r) for r in before_roots) if a is not None])
    sel = Selection()

    def occurrence(nodes: list, freed: set) -> Occurrence:
        acts = [a for a in (activation_of(r) for r in sorted(freed, key=rewriter.position.get)) if a is not None]
        return Occurrence(nodes, acts, max(rewriter.position[n] for n in nodes))

    if flags.transformer_layers:
        layers = transformer_layers(order)
        if len(layers) < 2:
            logger.warning("ORTTrainer: graph_transformer.transformer_layer_recompute is on, but the model has %s "
                           "(an attention after a layer norm, at least two): nothing to recompute",
                           "one transformer layer" if layers else "no transformer layers")
        else:
            chosen = _select_layers(layers, flags)
            for index, members in enumerate(layers):
                outputs = set(layer_outputs(members, forward))
                freed = rewriter.recompute(members, keep=outputs) if index < len(chosen) else set()
                occ = occurrence(members, freed if index < len(chosen)
                                 else ({alias_root(n) for n in members} & before_roots) - outputs)
                occ.label = f"layer {index}"
                cands.layers.append(occ)
                if index < len(chosen):
                    sel.applied.setdefault(LAYER_PLAN, []).append(occ)
            cands.layer_class = "between layer norms"
            sel.configs[LAYER_PLAN] = PlanConfig(LAYER_PLAN, RECOMPUTE, len(chosen))
    if flags.gelu:
        _apply_plan_regions(rewriter, gelu_regions(order), gelu_plan_name, cands, sel, occurrence,
                            "gelu_recompute", "no GELU (a gelu op, or a tanh GELU in elementwise ops)")
    if flags.attn_dropout:
        _apply_plan_regions(rewriter, attention_dropouts(order), lambda _: DROPOUT_PLAN, cands, sel, occurrence,
                            "attn_dropout_recompute", "no dropout of an attention's softmax in training mode")
    _drop_unused_copies(graph, rewriter.copies)
    gm.recompile()
    after_roots = stashed_roots(graph, forward)
    result = JointRecomputeResult(sel, cands, _bytes(before_roots), _bytes(after_roots),
                                  sum(1 for c in rewriter.copies if c.graph is graph and c.users))
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s\n  (ORTTrainer graph_transformer flags: %s)",
                    format_report(cands, sel, result.stashed_before, result.stashed_after), _flags_text(flags))
    return result


def _apply_plan_regions(rewriter: _Rewriter, regions: list, name_of, cands: Candidates, sel: Selection,
                        occurrence, flag: str, missing: str) -> None:
    if not regions:
        logger.warning("ORTTrainer: graph_transformer.%s is on, but the model has %s: nothing to recompute",
                       flag, missing)
        return
    for region in regions:
        name = name_of(region)
        freed = rewriter.recompute(region)
        occ = occurrence(region, freed)
        cands.plans.setdefault(name, []).append(occ)
        sel.configs[name] = PlanConfig(name, RECOMPUTE, -1)
        if freed:
            sel.applied.setdefault(name, []).append(occ)


def _drop_unused_copies(graph: torch.fx.Graph, copies: set) -> None:
    """Copies nothing reads (a region value whose readers another plan already moved)."""
    for n in reversed(list(graph.nodes)):
        if n in copies and not n.users:
            graph.erase_node(n)


def _flags_text(flags: RecomputeFlags) -> str:
    on = [name for name, value in (("attn_dropout_recompute", flags.attn_dropout), ("gelu_recompute", flags.gelu),
                                   ("transformer_layer_recompute", flags.transformer_layers)) if value]
    if flags.transformer_layers:
        on.append(f"number_recompute_layers={flags.number_layers}")
    return ", ".join(on)


__all__ = ["RecomputeFlags", "JointRecomputeResult", "forward_nodes", "recompute_joint_graph", "stashed_roots"]
