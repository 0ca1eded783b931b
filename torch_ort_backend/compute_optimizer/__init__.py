"""The padding-aware compute optimizer (ORTMODULE_ENABLE_COMPUTE_OPTIMIZER and its sparse switches).

Where it lives: on TorchDynamo's graph, before AOTAutograd (``trace_optimized``, called by the
"ort" backend). A rewrite there is differentiated by AOTAutograd like the user's own code, so the
backward of the selected rows (a scatter back to the padded shape) is derived, not written by hand,
and the forward, backward and inference graphs the engine gets are consistent by construction. The
row count is data-dependent: tracing it needs the frame's ShapeEnv to allow ops with dynamic output
shapes (``nonzero``), which ``trace_optimized`` grants for that trace only. docs/architecture.md
("The compute optimizer") says why not the engine's graph.

Passes: label_sparsity.py (cross-entropy over the valid labels; ORTTrainer: trainer_labels.py), on by
default; embedding_sparsity.py (the per-token layers over the valid tokens; off by default, as in
onnxruntime-training), whose graph is compiled beside the dense one and chosen per call by the
run-time check of padding_check.py. Both share the switches of ``label_sparsity_enabled`` and
``embedding_sparsity_enabled``, read by every path that runs them.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections import Counter
from typing import Any, Callable

import torch

from ..compile_state import COMPILE_STATE
from .embedding_sparsity import Declined, Plan, plan_embedding_sparsity
from .label_sparsity import LabelRewrite, has_losses, rewrite_label_sparsity
from .padding_check import PaddingProbe, dispatcher

logger = logging.getLogger("torch_ort_backend")


@dataclasses.dataclass
class ComputeOptimizerStats:
    """What the compute optimizer did in this process (tests read it to see that the pass fired)."""

    label_rewrites: int = 0  # cross-entropy losses computed over the valid labels only
    moved_ops: Counter = dataclasses.field(default_factory=Counter)  # ops now run on the valid rows only
    untraceable: int = 0  # graphs whose rewrite AOTAutograd could not trace: compiled without it
    rewrites: list = dataclasses.field(default_factory=list)  # every LabelRewrite, in order
    # the embedding case: graphs compiled with it, the ops it runs on the valid tokens only, graphs it
    # declined (with the reason), and per call which graph ran
    embedding_rewrites: int = 0
    embedding_moved_ops: Counter = dataclasses.field(default_factory=Counter)
    embedding_declined: list = dataclasses.field(default_factory=list)
    embedding_plans: list = dataclasses.field(default_factory=list)  # every Plan, in order
    embedding_sparse_calls: int = 0  # calls that ran the graph over the valid tokens
    embedding_dense_calls: int = 0  # calls without padding (the dense graph: nothing to save)
    embedding_check_failures: int = 0  # calls whose run-time check failed (the dense graph ran)
    embedding_failure_reasons: Counter = dataclasses.field(default_factory=Counter)

    def reset(self) -> None:
        self.__init__()


STATS = ComputeOptimizerStats()


def label_sparsity_enabled(opts: Any) -> bool:
    """The label case runs when the compute optimizer, the sparse optimizers and the label one are on
    (all three are, by default, as in onnxruntime-training)."""
    return bool(opts.enable_compute_optimizer and opts.enable_sparse_optimizer and opts.enable_label_sparse_optimizer)


def embedding_sparsity_enabled(opts: Any) -> bool:
    """The embedding case runs when the compute optimizer, the sparse optimizers and the embedding one
    are on (the last is off by default, as in onnxruntime-training)."""
    return bool(opts.enable_compute_optimizer and opts.enable_sparse_optimizer
                and opts.enable_embedding_sparse_optimizer)


def _restart(e: BaseException) -> bool:
    name = type(e).__name__
    return "Restart" in name or "TensorifyScalarRestartAnalysis" in name


class _DynamicOutputShapes:
    """Lets the frame's ShapeEnv trace ops whose output size depends on data (``nonzero``), for the
    duration of one trace. Dynamo allows them only under fullgraph or capture_dynamic_output_shape_ops;
    the rows the pass selects are such a size."""

    def __init__(self, shape_env: Any) -> None:
        self.shape_env = shape_env
        self.saved = None

    def __enter__(self) -> None:
        self.saved = self.shape_env.settings
        if not self.saved.allow_dynamic_output_shape_ops:
            self.shape_env.settings = dataclasses.replace(self.saved, allow_dynamic_output_shape_ops=True)

    def __exit__(self, *exc: Any) -> None:
        self.shape_env.settings = self.saved


def trace_optimized(aot: Callable, gm: torch.fx.GraphModule, example_inputs: list, opts: Any) -> Any:
    """``aot(gm, example_inputs)`` on the graph rewritten by the enabled passes. A rewrite that
    AOTAutograd cannot trace is undone with a warning and the graph compiled as it came: the
    optimizer may cost speed, never the compile. With the embedding case, the result is a dispatcher
    over two compiled graphs (padding_check.py)."""
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    shape_env = getattr(fake_mode, "shape_env", None)
    labels = label_sparsity_enabled(opts) and has_losses(gm)
    embeddings = embedding_sparsity_enabled(opts)
    if shape_env is None or not (labels or embeddings):
        return aot(gm, example_inputs)
    original = copy.deepcopy(gm.graph)
    # TorchDynamo marks each placeholder with its source (an attribute, not in node.meta), which a
    # copied graph lacks and AOTAutograd asserts on: kept to put back with the original.
    sources = {n.name: n._dynamo_source for n in gm.graph.nodes if hasattr(n, "_dynamo_source")}
    rewrites: list[LabelRewrite] = rewrite_label_sparsity(gm) if labels else []
    plan = _plan(gm) if embeddings else None
    if not rewrites and plan is None:
        return aot(gm, example_inputs)
    if not rewrites:
        dense = aot(gm, example_inputs)
    else:
        with _DynamicOutputShapes(shape_env):
            dense = _trace(aot, gm, example_inputs, rewrites)
    if rewrites and dense is None:  # the label rewrite could not be traced: without it
        gm.graph = original
        for node in original.find_nodes(op="placeholder"):
            if node.name in sources:
                node._dynamo_source = sources[node.name]
        gm.recompile()
        plan = _plan(gm) if embeddings else None
        dense = aot(gm, example_inputs)
    elif rewrites:
        _count_label_rewrites(rewrites)
    if plan is None:
        return dense
    with _DynamicOutputShapes(shape_env):
        sparse = _trace(aot, plan.gm, example_inputs, plan.entries)
    if sparse is None:
        return dense
    try:
        probe = PaddingProbe(gm, plan)
    except Exception as e:
        STATS.embedding_declined.append(f"the run-time check could not be built: {type(e).__name__}: {e}")
        logger.warning("compute optimizer: the embedding case's run-time check could not be built (%s: %s); "
                       "compiling the graph without it", type(e).__name__, e)
        return dense
    STATS.embedding_rewrites += 1
    STATS.embedding_plans.append(plan)
    STATS.embedding_moved_ops.update(plan.moved_ops)
    COMPILE_STATE.stats.embedding_sparse_rewrites += 1
    logger.info("compute optimizer: the per-token layers after %s run over the valid tokens only (%d ops; "
                "%d attentions checked per call; outputs restored: %s)", ", ".join(plan.entries),
                sum(plan.moved_ops.values()), len(plan.attentions), ", ".join(plan.restored) or "none")
    return dispatcher(probe, sparse, dense, STATS, f"the graph of {', '.join(plan.entries)}")


def _plan(gm: torch.fx.GraphModule) -> Plan | None:
    try:
        return plan_embedding_sparsity(gm)
    except Declined as e:
        STATS.embedding_declined.append(str(e))
        logger.info("compute optimizer: the embedding case declines this graph: %s", e)
    except Exception as e:  # a fault of the pass: the optimizer may cost speed, never the compile
        STATS.embedding_declined.append(f"{type(e).__name__}: {e}")
        logger.warning("compute optimizer: the embedding case failed on this graph (%s: %s); compiling it "
                       "without", type(e).__name__, e)
    return None


def _trace(aot: Callable, gm: torch.fx.GraphModule, example_inputs: list, what: list) -> Any:
    """aot(gm), or None with a warning when AOTAutograd cannot trace the rewritten graph."""
    try:
        return aot(gm, example_inputs)
    except Exception as e:
        if _restart(e):
            raise
        STATS.untraceable += 1
        names = ", ".join(getattr(w, "loss", None) or str(w) for w in what)
        logger.warning("compute optimizer: the rewrite of %s could not be traced (%s: %s); compiling the graph "
                       "without it", names, type(e).__name__, e)
        return None


def _count_label_rewrites(rewrites: list[LabelRewrite]) -> None:
    STATS.label_rewrites += len(rewrites)
    COMPILE_STATE.stats.label_sparse_rewrites += len(rewrites)
    STATS.rewrites.extend(rewrites)
    for r in rewrites:
        STATS.moved_ops.update(r.moved_ops)
        logger.info("compute optimizer: %s over the valid labels only, rows selected from %s%s", r.loss,
                    r.selected_from, f" (before {', '.join(r.moved_ops)})" if r.moved_ops else "")


__all__ = ["STATS", "ComputeOptimizerStats", "LabelRewrite", "embedding_sparsity_enabled", "label_sparsity_enabled",
           "plan_embedding_sparsity", "rewrite_label_sparsity", "trace_optimized"]
