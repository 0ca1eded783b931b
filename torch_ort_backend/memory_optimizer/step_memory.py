"""Peak memory of a training step as the engine counts it: ``torch_ort_backend.memory_stats()``.

For every compiled graph, the engine's accounting of its last run (``last_run_stats()``):
``peak_bytes`` (intermediates and kernel scratch) and ``peak_live_bytes`` (those plus tensors kernels
allocated themselves and the graph outputs made so far). A backward graph also reads the
activations the forward stashed: they are its inputs. Those AOTAutograd donates (below) the run
holds until their last reader and counts in ``peak_live_bytes``; the others are alive for the whole
run, so its step peak is their bytes plus its ``peak_live_bytes``. A forward graph's
``peak_live_bytes`` already holds the stash it makes (its outputs).

Donation. AOTAutograd hands the compiled backward its saved tensors in a list the backward owns
(``call_func_at_runtime_with_args(..., steal_args=True)``, after clearing ``ctx``'s own references),
and lists the ones nothing else can hold (``fw_metadata.bw_donated_idxs``: no forward input, user
output or gradient shares their storage; empty when the graph is kept for a second backward). The
backward takes those out of the list and has the engine drop them after their last reader, so each
stashed activation is freed inside the run, as eager frees a saved tensor after its node.

    forward_peak_bytes   the most a forward run held (its intermediates and everything it returns)
    backward_peak_bytes  the most a backward run held, with the stash it reads
    step_peak_bytes      the larger: the engine's peak over one training step
    step_held_bytes      the same with each run's planned arena counted whole (``peak_held_bytes``):
                         the memory the engine makes the process hold, as its resident set sees it

A backward graph and its variants for outputs that got no gradient (zero_tangents.py) count as one
graph: the figures, and the entry under "graphs", are those of whichever ran last.

Parameters, inputs, optimizer state and memory torch holds on its side are not counted: they do not
change with the memory optimizer's plans. With graph breaks, each graph is counted on its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch

_RUN_ORDER = itertools.count(1)  # GraphMemory.order: which of a graph's variants ran last


def _saved_activation_inputs(gm: torch.fx.GraphModule) -> tuple:
    """Positions of a backward graph's inputs that are stashed activations: AOTAutograd names the
    forward's own inputs primals_* and the incoming gradients tangents_*; the rest the forward
    saved for this graph (activations, random-number states)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(i for i, n in enumerate(placeholders)
                 if not n.name.startswith(("primals", "tangents")) and isinstance(n.meta.get("val"), torch.Tensor))


def _donated_inputs(saved_inputs: tuple) -> tuple:
    """The saved activations AOTAutograd donates to the backward being compiled (the module
    docstring): its ``bw_donated_idxs``, read as Inductor reads them, while the backward compiles."""
    context = torch._guards.TracingContext.try_get()
    donated = getattr(getattr(context, "fw_metadata", None), "bw_donated_idxs", None) or ()
    return tuple(i for i in saved_inputs if i in set(donated))


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
    donated_inputs: tuple = ()  # backward: the saved activations it may free (the module docstring)
    runs: int = 0
    saved_bytes: int = 0  # backward: the stashed activations it read
    donated_bytes: int = 0  # backward: those of them donated to the run (counted in peak_live_bytes)
    _taken: bool = False  # take_donated ran for the current run
    # The session of the last run: its peaks are read from it when asked, not on every run (0.4 us
    # a run). Exact while this graph is the session's last runner; a graph sharing its session with
    # an identical export keeps its own figures: claim() copies them out before another graph runs it.
    _source: Any = None
    _frozen: tuple = (0, 0, 0)
    # A variant of a backward graph (zero_tangents.py) and the graph it varies are one graph to
    # memory_stats(): the one that ran last (``order``) counts, not both.
    variant_of: Any = None
    order: int = 0

    def _peaks(self) -> tuple[int, int, int]:
        """peak_bytes, peak_live_bytes, peak_held_bytes of this graph's last run."""
        source = self._source
        if source is None or getattr(source, "_peaks_owner", None) is not self:
            return self._frozen
        stats = source.last_run_stats()
        return int(stats["peak_bytes"]), int(stats["peak_live_bytes"]), int(stats["peak_held_bytes"])

    def claim(self, session: Any) -> None:
        """Before this graph runs ``session``: the graph whose last run the session holds copies its
        peaks out (the run about to start replaces them). The caller checks
        ``session._peaks_owner is not self`` first, so this runs only when the runner changes."""
        previous = getattr(session, "_peaks_owner", None)
        if previous is not None and previous is not self:
            previous._frozen = previous._peaks()
            previous._source = None
        session._peaks_owner = self

    @property
    def peak_bytes(self) -> int:
        return self._peaks()[0]

    @property
    def peak_live_bytes(self) -> int:
        return self._peaks()[1]

    @property
    def peak_held_bytes(self) -> int:  # peak_live_bytes with the planned arena counted whole
        return self._peaks()[2]

    @classmethod
    def for_graph(cls, gm: torch.fx.GraphModule, stage: str, donated: tuple | None = None) -> "GraphMemory":
        """``donated``: the inputs AOTAutograd donates, when it is not compiling ``gm`` (a variant of
        a backward graph, zero_tangents.py: the same saved inputs at the same positions)."""
        if stage != "backward":
            return cls(stage)
        saved = _saved_activation_inputs(gm)
        return cls(stage, saved, _donated_inputs(saved) if donated is None else tuple(i for i in saved if i in donated))

    def keep_returned_inputs(self, output_kinds: list) -> None:
        """Never donate an input the graph hands back (an output that is an input or a view of one)."""
        returned = {kind[1] for kind in output_kinds if isinstance(kind, tuple) and kind[0] == "input"}
        returned |= {kind[1][1] for kind in output_kinds
                     if isinstance(kind, tuple) and kind[0] == "view" and kind[1][0] == "input"}
        self.donated_inputs = tuple(i for i in self.donated_inputs if i not in returned)

    def take_donated(self, args: list) -> list[bool]:
        """Flags by input position for the engine's run (``donated``), and the donated tensors taken
        out of ``args`` (AOTAutograd's list): after this, the engine's reference is the last one.
        Not on the graph's first run, so that a run that fails there can still be rerun (the eager
        fallback) with every input."""
        if not self.donated_inputs or not self.runs:
            return []
        self.saved_bytes = _distinct_bytes(args[i] for i in self.saved_inputs if i < len(args))
        self.donated_bytes = _distinct_bytes(args[i] for i in self.donated_inputs if i < len(args))
        self._taken = True
        flags = [False] * len(args)
        for i in self.donated_inputs:
            if i < len(args) and isinstance(args[i], torch.Tensor):
                flags[i] = True
                args[i] = None
        return flags

    def record(self, session: Any, args: list) -> None:
        """After a successful run of ``session`` (claimed before it): its peaks are this graph's.
        (CompiledGraph._run_fast and its lean_run closure inline the steps for graphs without saved
        inputs: keep all three alike.)"""
        self._source = session
        if self._taken:
            self._taken = False
        elif self.saved_inputs:
            self.saved_bytes = _distinct_bytes(args[i] for i in self.saved_inputs if i < len(args))
            self.donated_bytes = 0
        self.runs += 1
        self.order = next(_RUN_ORDER)

    @property
    def step_peak_bytes(self) -> int:
        # Donated activations are in peak_live_bytes while the run holds them; the rest, all along.
        return self.saved_bytes - self.donated_bytes + self.peak_live_bytes

    @property
    def step_held_bytes(self) -> int:
        return self.saved_bytes - self.donated_bytes + self.peak_held_bytes

    def as_dict(self) -> dict:
        peak, live, held = self._peaks()
        kept = self.saved_bytes - self.donated_bytes
        return {"stage": self.stage, "runs": self.runs, "peak_bytes": peak, "peak_live_bytes": live,
                "peak_held_bytes": held, "saved_bytes": self.saved_bytes, "donated_bytes": self.donated_bytes,
                "step_peak_bytes": kept + live, "step_held_bytes": kept + held}


def memory_stats() -> dict:
    """The engine's memory at the last run of each compiled graph still alive (of a backward graph
    and its variants, the one that ran last; see the module docstring): {"forward_peak_bytes", "backward_peak_bytes", "step_peak_bytes", "step_held_bytes", "graphs":
    {name: {"stage", "runs", "peak_bytes", "peak_live_bytes", "peak_held_bytes", "saved_bytes", "donated_bytes",
    "step_peak_bytes", "step_held_bytes"}}}."""
    from ..compiled_graph import live_graphs

    graphs = {g.name: g.memory for g in live_graphs() if getattr(g, "memory", None) is not None and g.memory.runs}
    latest: dict = {}  # per graph, of it and its variants the one that ran last
    for m in graphs.values():
        family = id(m.variant_of or m)
        if family not in latest or m.order > latest[family].order:
            latest[family] = m
    current = {name: m for name, m in graphs.items() if latest[id(m.variant_of or m)] is m}
    forward = max((m.step_peak_bytes for m in current.values() if m.stage == "forward"), default=0)
    backward = max((m.step_peak_bytes for m in current.values() if m.stage == "backward"), default=0)
    held = max((m.step_held_bytes for m in current.values()), default=0)
    return {"forward_peak_bytes": forward, "backward_peak_bytes": backward,
            "step_peak_bytes": max(forward, backward), "step_held_bytes": held,
            "graphs": {name: m.as_dict() for name, m in current.items()}}
