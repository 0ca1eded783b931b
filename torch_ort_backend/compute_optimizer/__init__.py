"""The padding-aware compute optimizer (ORTMODULE_ENABLE_COMPUTE_OPTIMIZER and its sparse switches).

Where it lives: on TorchDynamo's graph, before AOTAutograd (``trace_optimized``, called by the
"ort" backend). A rewrite there is differentiated by AOTAutograd like the user's own code, so the
backward of the selected rows (a scatter back to the padded shape) is derived, not written by hand,
and the forward, backward and inference graphs the engine gets are consistent by construction. The
row count is data-dependent: tracing it needs the frame's ShapeEnv to allow ops with dynamic output
shapes (``nonzero``), which ``trace_optimized`` grants for that trace only. docs/architecture.md
("The compute optimizer") says why not the engine's graph.

Passes: label_sparsity.py (cross-entropy over the valid labels; ORTTrainer: trainer_labels.py). The embedding-sparsity case
(ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER) is not built and stays refused by options.py.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections import Counter
from typing import Any, Callable

import torch

from ..compile_state import COMPILE_STATE
from .label_sparsity import LabelRewrite, has_losses, rewrite_label_sparsity

logger = logging.getLogger("torch_ort_backend")


@dataclasses.dataclass
class ComputeOptimizerStats:
    """What the compute optimizer did in this process (tests read it to see that the pass fired)."""

    label_rewrites: int = 0  # cross-entropy losses computed over the valid labels only
    moved_ops: Counter = dataclasses.field(default_factory=Counter)  # ops now run on the valid rows only
    untraceable: int = 0  # graphs whose rewrite AOTAutograd could not trace: compiled without it
    rewrites: list = dataclasses.field(default_factory=list)  # every LabelRewrite, in order

    def reset(self) -> None:
        self.__init__()


STATS = ComputeOptimizerStats()


def label_sparsity_enabled(opts: Any) -> bool:
    """The label case runs when the compute optimizer, the sparse optimizers and the label one are on
    (all three are, by default, as in onnxruntime-training)."""
    return bool(opts.enable_compute_optimizer and opts.enable_sparse_optimizer and opts.enable_label_sparse_optimizer)


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
    optimizer may cost speed, never the compile."""
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    shape_env = getattr(fake_mode, "shape_env", None)
    if not label_sparsity_enabled(opts) or shape_env is None or not has_losses(gm):
        return aot(gm, example_inputs)
    original = copy.deepcopy(gm.graph)
    rewrites: list[LabelRewrite] = rewrite_label_sparsity(gm)
    if not rewrites:
        return aot(gm, example_inputs)
    try:
        with _DynamicOutputShapes(shape_env):
            compiled = aot(gm, example_inputs)
    except Exception as e:
        if _restart(e):
            raise
        STATS.untraceable += 1
        logger.warning("compute optimizer: the label-sparsity rewrite of %s could not be traced (%s: %s); "
                       "compiling the graph without it", ", ".join(r.loss for r in rewrites), type(e).__name__, e)
        gm.graph = original
        gm.recompile()
        return aot(gm, example_inputs)
    STATS.label_rewrites += len(rewrites)
    COMPILE_STATE.stats.label_sparse_rewrites += len(rewrites)
    STATS.rewrites.extend(rewrites)
    for r in rewrites:
        STATS.moved_ops.update(r.moved_ops)
        logger.info("compute optimizer: %s over the valid labels only, rows selected from %s%s", r.loss,
                    r.selected_from, f" (before {', '.join(r.moved_ops)})" if r.moved_ops else "")
    return compiled


__all__ = ["STATS", "ComputeOptimizerStats", "LabelRewrite", "label_sparsity_enabled", "rewrite_label_sparsity",
           "trace_optimized"]
