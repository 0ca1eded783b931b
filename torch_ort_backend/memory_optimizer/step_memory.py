"""Peak memory of a training step as the engine counts it: ``torch_ort_backend.memory_stats()``.

For every compiled graph, the engine's accounting of its last run (``last_run_stats()``):
``peak_bytes`` (intermediates and kernel scratch) and ``peak_live_bytes`` (those plus tensors kernels
allocated themselves and the graph outputs made so far). A backward graph also reads the
activations the forward stashed: they are its inputs, alive for the whole run, so its step peak
is their bytes plus its own ``peak_live_bytes``. A forward graph's ``peak_live_bytes`` already holds
the stash it makes (its outputs).

    forward_peak_bytes   the most a forward run held (its intermediates and everything it returns)
    backward_peak_bytes  the most a backward run held, with the stash it reads
    step_peak_bytes      the larger: the engine's peak over one training step

Parameters, inputs, optimizer state and memory torch holds on its side are not counted: they do not
change with the memory optimizer's plans. With graph breaks, each graph is counted on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def _saved_activation_inputs(gm: torch.fx.GraphModule) -> tuple:
    """Positions of a backward graph's inputs that are stashed activations: AOTAutograd names the
    forward's own inputs primals_* and the incoming gradients tangents_*; the rest the forward
    saved for this graph (activations, random-number states)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(i for i, n in enumerate(placeholders)
                 if not n.name.startswith(("primals", "tangents")) and isinstance(n.meta.get("val"), torch.Tensor))


def _distinct_bytes(tensors) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


@dataclass
class GraphMemory:
    """One compiled graph's memory at its last engine run."""

    stage: str
    saved_inputs: tuple = ()
    runs: int = 0
    peak_bytes: int = 0
    peak_live_bytes: int = 0
    saved_bytes: int = 0  # backward: the stashed activations it read

    @classmethod
    def for_graph(cls, gm: torch.fx.GraphModule, stage: str) -> "GraphMemory":
        return cls(stage, _saved_activation_inputs(gm) if stage == "backward" else ())

    def record(self, session: Any, args: list) -> None:
        stats = session.last_run_stats()
        self.peak_bytes = int(stats["peak_bytes"])
        self.peak_live_bytes = int(stats["peak_live_bytes"])
        if self.saved_inputs:
            self.saved_bytes = _distinct_bytes(args[i] for i in self.saved_inputs if i < len(args))
        self.runs += 1

    @property
    def step_peak_bytes(self) -> int:
        return self.saved_bytes + self.peak_live_bytes

    def as_dict(self) -> dict:
        return {"stage": self.stage, "runs": self.runs, "peak_bytes": self.peak_bytes,
                "peak_live_bytes": self.peak_live_bytes, "saved_bytes": self.saved_bytes,
                "step_peak_bytes": self.step_peak_bytes}


def memory_stats() -> dict:
    """The engine's memory at the last run of each compiled graph still alive (see the module
    docstring): {"forward_peak_bytes", "backward_peak_bytes", "step_peak_bytes", "graphs": {name:
    {"stage", "runs", "peak_bytes", "peak_live_bytes", "saved_bytes", "step_peak_bytes"}}}."""
    from ..compiled_graph import live_graphs

    graphs = {g.name: g.memory for g in live_graphs() if getattr(g, "memory", None) is not None and g.memory.runs}
    forward = max((m.step_peak_bytes for m in graphs.values() if m.stage == "forward"), default=0)
    backward = max((m.step_peak_bytes for m in graphs.values() if m.stage == "backward"), default=0)
    return {"forward_peak_bytes": forward, "backward_peak_bytes": backward,
            "step_peak_bytes": max(forward, backward),
            "graphs": {name: m.as_dict() for name, m in graphs.items()}}
