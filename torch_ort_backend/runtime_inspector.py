"""The runtime inspector: ORTMODULE_PRINT_INPUT_DENSITY and ORTMODULE_PRINT_MEMORY_STATS.

Input density, as onnxruntime-training's inspector reported it: for each graph input that is a label
of a loss (the target of ``nll_loss_forward``, which cross-entropy becomes) or the indices of an
embedding with a ``padding_idx``, the share of its elements that are not padding (``!= ignore_index``
or ``!= padding_idx``). Inputs are found once per compiled forward graph by walking back from the
loss or embedding through the ops that only move or select values (views, slices, the pad HuggingFace
adds with the ignore index itself); an input reached through arithmetic is not reported, because its
values are no longer the ones padding is judged by. The share is what the padding-aware compute
optimizer could skip.

Memory: after each engine run, the engine's own accounting of that run (``last_run_stats()``: peak
bytes of intermediates, arena bytes) per graph and phase (forward, backward, inference).

Both print to standard output, one line per graph and step, as onnxruntime-training did.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Sequence

import torch

aten = torch.ops.aten

# Ops whose output elements are input elements (or the padding value): walking back through them
# keeps the meaning "the label / token at this position".
_VALUE_PRESERVING = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.clone.default,
    aten.slice.Tensor, aten.select.int, aten.expand.default, aten.contiguous.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default, aten.permute.default,
    aten.t.default, aten.transpose.int, aten.alias.default, aten.detach.default,
    aten._to_copy.default, aten.flatten.using_ints,
}
_PAD = aten.constant_pad_nd.default


@dataclasses.dataclass(frozen=True)
class DensityProbe:
    kind: str  # "label" or "embedding"
    input_index: int  # position among the graph's inputs
    input_name: str
    padding_value: int  # ignore_index or padding_idx


def _source_placeholder(node: torch.fx.Node, padding_value: int) -> torch.fx.Node | None:
    while node.op == "call_function":
        if node.target in _VALUE_PRESERVING:
            node = node.args[0]
        elif node.target is _PAD and len(node.args) > 2 and node.args[2] == padding_value:
            node = node.args[0]  # the pad adds padding, so the input's density is the one to report
        elif node.target is aten.index_select.default:
            node = node.args[0]  # the compute optimizer's selection of the valid labels (compute_optimizer/)
        else:
            return None
    return node if node.op == "placeholder" else None


def find_density_probes(gm: torch.fx.GraphModule) -> list[DensityProbe]:
    """The label and embedding inputs of an ATen forward graph (see the module docstring)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    probes: dict[tuple, DensityProbe] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in (aten.nll_loss_forward.default, aten.nll_loss2d_forward.default):
            kind, source, pad = "label", node.args[1], node.args[4] if len(node.args) > 4 else -100
        elif node.target is aten.embedding.default:
            pad = node.args[2] if len(node.args) > 2 else node.kwargs.get("padding_idx", -1)
            if not isinstance(pad, int) or pad < 0:
                continue  # no padding index: nothing marks padding (onnxruntime-training skipped these too)
            kind, source = "embedding", node.args[1]
        else:
            continue
        if not isinstance(source, torch.fx.Node) or not isinstance(pad, int):
            continue
        found = _source_placeholder(source, pad)
        if found is not None:
            index = placeholders.index(found)
            probes[(kind, index)] = DensityProbe(kind, index, found.name, pad)
    return sorted(probes.values(), key=lambda p: (p.kind != "label", p.input_index))


def density_line(graph_name: str, step: int, probes: Sequence[DensityProbe], args: Sequence[Any]) -> str:
    parts = []
    for p in probes:
        t = args[p.input_index]
        total = t.numel()
        valid = int((t != p.padding_value).sum()) if total else 0
        share = 100.0 * valid / total if total else 100.0
        what = "ignore_index" if p.kind == "label" else "padding_idx"
        parts.append(f"{p.kind} input '{p.input_name}' ({what} {p.padding_value}): "
                     f"{share:.1f}% dense ({valid}/{total})")
    return f"[input density] {graph_name} step {step}: " + "; ".join(parts)


def memory_line(graph_name: str, stage: str, step: int, stats: dict) -> str:
    mib = 1024.0 * 1024.0
    peak, arena = int(stats.get("peak_bytes", 0)), int(stats.get("arena_bytes", 0))
    return (f"[memory] {graph_name} ({stage}) step {step}: peak {peak} bytes ({peak / mib:.2f} MiB) of "
            f"intermediates, arena {arena} bytes ({arena / mib:.2f} MiB), "
            f"plan {'reused' if stats.get('planned') else 'not reused'}")


class RuntimeInspector:
    """Attached to one CompiledGraph when either print option is on."""

    def __init__(self, gm: torch.fx.GraphModule, graph_name: str, stage: str, density: bool, memory: bool) -> None:
        self.graph_name = graph_name
        self.stage = stage
        self.memory = memory
        # Only forward and inference graphs take the user's inputs; a backward's are saved tensors.
        self.probes = find_density_probes(gm) if density and stage != "backward" else []
        self.step = 0

    def before_run(self, args: Sequence[Any]) -> None:
        self.step += 1
        if self.probes:
            print(density_line(self.graph_name, self.step, self.probes, args), file=sys.stdout, flush=True)

    def after_run(self, session: Any) -> None:
        if self.memory and session is not None:
            print(memory_line(self.graph_name, self.stage, self.step, session.last_run_stats()),
                  file=sys.stdout, flush=True)


def inspector_for(gm: torch.fx.GraphModule, graph_name: str, stage: str, opts: Any) -> RuntimeInspector | None:
    if not (opts.print_input_density or opts.print_memory_stats):
        return None
    return RuntimeInspector(gm, graph_name, stage, opts.print_input_density, opts.print_memory_stats)


__all__ = ["DensityProbe", "RuntimeInspector", "find_density_probes", "inspector_for"]
