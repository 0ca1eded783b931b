"""The "ort" backend's partition_fn: torch's min-cut partitioner, told which forward nodes the
backward must recompute.

1. Partition without plans (level 0): the values the min-cut saves are the stashed activations.
2. Find the plans that could free them (analysis.py) and choose the ones the level and the config
   turn on (select).
3. Tag the chosen nodes as AOTAutograd's activation checkpointing does (node.meta["recompute"] =
   MUST_RECOMPUTE; a layer's outputs MUST_SAVE) and partition again: the min-cut then cuts around
   them, so what the forward saves and where the backward recomputes is still torch's decision,
   with its RNG functionalisation for dropout (rng_replay.py makes that exportable).
4. Report (report.py).

The second partition runs only when a plan is on; with none the first one is returned unchanged.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.utils.checkpoint import CheckpointPolicy

from .free_rebuild import rebuild_dropout_outputs, rebuild_elementwise_from_stash
from .analysis import Candidates, Occurrence, alias_root, analyze, recomputable
from .plans import LAYER_PLAN, RECOMPUTE, RECOMPUTE_WITH_COMPROMISE, PlanConfig
from .report import log_report
from .rng_replay import replace_rng_wrappers

logger = logging.getLogger("torch_ort_backend")


@dataclass
class Selection:
    """Per plan name: the config in force and the occurrences it recomputes."""

    configs: dict = field(default_factory=dict)  # name -> PlanConfig (on or off)
    applied: dict = field(default_factory=dict)  # name -> [Occurrence]
    level: int = 0
    unmatched: list = field(default_factory=list)  # configured plans this graph does not have

    def any_applied(self) -> bool:
        return any(self.applied.values())


def select(cands: Candidates, level: int, configured: Sequence[PlanConfig]) -> Selection:
    """Level 1 turns on TransformerLayer for every layer but the last (the last layer's backward
    runs right after its forward: recomputing it frees nothing at the peak); level 2 every layer
    and every op plan. A configured plan overrides the level's choice for its name (strategy 0
    turns a plan off)."""
    sel = Selection(level=level)
    if level >= 1 and len(cands.layers) >= 2:
        sel.configs[LAYER_PLAN] = PlanConfig(LAYER_PLAN, RECOMPUTE, -1 if level >= 2 else len(cands.layers) - 1)
    if level >= 2:
        for name in cands.plans:
            sel.configs[name] = PlanConfig(name, RECOMPUTE, -1)
    for plan in configured:
        sel.configs[plan.name] = plan
        if (plan.name == LAYER_PLAN and not cands.layers) or (plan.name != LAYER_PLAN and plan.name not in cands.plans):
            sel.unmatched.append(plan)
    for name, plan in sel.configs.items():
        occurrences = cands.layers if name == LAYER_PLAN else cands.plans.get(name, [])
        sel.applied[name] = [o for i, o in enumerate(occurrences) if plan.applies_to(i)]
    return sel


def _tag(node: torch.fx.Node, policy: CheckpointPolicy) -> None:
    if "recompute" not in node.meta or node.meta.get("tob_memopt_tag"):
        node.meta["recompute"] = policy
        node.meta["tob_memopt_tag"] = True


def _mark(cands: Candidates, sel: Selection) -> int:
    """Tags the nodes of every applied occurrence; returns how many nodes must be recomputed."""
    marked = 0
    for name, occurrences in sel.applied.items():
        strategy = sel.configs[name].strategy
        for occ in occurrences:
            if name == LAYER_PLAN:
                marked += _mark_layer(occ, cands.layers.index(occ), strategy)
                continue
            for n in occ.nodes:
                _tag(n, CheckpointPolicy.MUST_RECOMPUTE)
                marked += 1
    return marked


def _mark_layer(layer: Occurrence, index: int, strategy: int) -> int:
    marked = 0
    for n in layer.nodes:
        n.meta["ac_graph_id"] = 1_000_000 + index
        if n in layer.outputs:
            _tag(n, CheckpointPolicy.MUST_SAVE)
        elif recomputable(n) and not (strategy == RECOMPUTE_WITH_COMPROMISE and n in layer.heavy_nodes):
            _tag(n, CheckpointPolicy.MUST_RECOMPUTE)
            marked += 1
    return marked


def _forward_names(joint: torch.fx.GraphModule) -> set:
    """Nodes computable without the incoming gradients (tangents)."""
    backward: set = set()
    for node in joint.graph.nodes:
        if (node.op == "placeholder" and "tangents" in node.name) or any(a in backward for a in node.all_input_nodes):
            backward.add(node)
    return {n.name for n in joint.graph.nodes if n not in backward and n.op != "output"}


def _forward_reader_names(joint: torch.fx.GraphModule, num_fwd_outputs: int) -> set:
    """The nodes the joint graph's forward outputs (the user's outputs, what the forward mutates)
    are computed from: the readers that make a layer's value one of its outputs. A node that needs
    no incoming gradient but feeds only the backward (the transposed operand of a matrix product's
    gradient) is not one of them: counted, it made the values it reads look like layer outputs,
    stashed instead of recomputed (GPT-2: the three batched operands of each attention)."""
    output = next(iter(joint.graph.find_nodes(op="output")))
    stack = [n for n in output.args[0][:num_fwd_outputs] if isinstance(n, torch.fx.Node)]
    readers: set = set()
    while stack:
        n = stack.pop()
        if n not in readers:
            readers.add(n)
            stack.extend(n.all_input_nodes)
    return {n.name for n in readers if n.op != "output"}


def saved_values(fw: torch.fx.GraphModule, num_fwd_outputs: int) -> list:
    output = next(iter(fw.graph.find_nodes(op="output")))
    return [n for n in output.args[0][num_fwd_outputs:] if isinstance(n, torch.fx.Node)]


def stashed_bytes(fw: torch.fx.GraphModule, num_fwd_outputs: int) -> int:
    """Bytes of the activations the forward saves for the backward (not inputs, parameters or
    views of them), at the shapes seen."""
    from .analysis import activation_of

    roots = {alias_root(n) for n in saved_values(fw, num_fwd_outputs)}
    total = 0
    for r in roots:
        if r.op == "call_function":
            a = activation_of(r)
            total += a.nbytes if a is not None else 0
    return total


def _min_cut(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any):
    # recompute_views: a saved view would be a graph output copied every step (backend._partition).
    # cse: our own pass when the joint graph does not mutate (joint_cse.py: torch's imports Inductor).
    from .joint_cse import cse_joint

    cse = torch._functorch.config.cse and not cse_joint(joint)
    with torch._functorch.config.patch(recompute_views=True, cse=cse):
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


def partition_with_plans(joint: torch.fx.GraphModule, joint_inputs: Any, *, level: int,
                         plans: Sequence[PlanConfig], **kwargs: Any):
    """min_cut_rematerialization_partition with the memory optimizer's plans applied."""
    fw, bw = _min_cut(joint, joint_inputs, **kwargs)
    try:
        return _apply_plans(joint, joint_inputs, fw, bw, level, plans, **kwargs)
    except Exception as e:  # the plans are an optimisation: a graph they fail on trains without them
        warnings.warn(f"torch_ort_backend: the memory optimizer failed on a training graph "
                      f"({type(e).__name__}: {e}); it runs without recompute plans", UserWarning, stacklevel=2)
        logger.debug("memory optimizer failure", exc_info=True)
        return fw, bw


def _apply_plans(joint: torch.fx.GraphModule, joint_inputs: Any, fw: torch.fx.GraphModule,
                 bw: torch.fx.GraphModule, level: int, plans: Sequence[PlanConfig], **kwargs: Any):
    num_fwd_outputs = kwargs["num_fwd_outputs"]
    saved = saved_values(fw, num_fwd_outputs)
    if not saved:
        return fw, bw
    forward = _forward_names(joint)
    readers = _forward_reader_names(joint, num_fwd_outputs)
    cands = analyze(joint, [n.name for n in saved], forward, readers)
    if cands.empty():
        return fw, bw
    sel = select(cands, level, plans)
    before = stashed_bytes(fw, num_fwd_outputs)
    if not sel.any_applied():
        log_report(cands, sel, before, None)
        return fw, bw
    _mark(cands, sel)
    if level >= 1:  # attention's dropped-out probabilities are rebuilt, not stashed (free_rebuild.py)
        rebuild_dropout_outputs(joint, readers)
        # and values a few pointwise ops make from what the backward reads anyway (free_rebuild.py)
        rebuild_elementwise_from_stash(joint, {n.name for n in saved}, num_fwd_outputs)
    fw_plans, bw_plans = _min_cut(joint, joint_inputs, **kwargs)
    replace_rng_wrappers(fw_plans, bw_plans)
    log_report(cands, sel, before, stashed_bytes(fw_plans, num_fwd_outputs))
    return fw_plans, bw_plans


__all__ = ["Selection", "partition_with_plans", "select", "stashed_bytes"]
