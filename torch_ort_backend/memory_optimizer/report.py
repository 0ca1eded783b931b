"""The "Memory Optimizer" report: every plan of a training graph in config syntax, on or off, the
stashed activations it covers (dtype, symbolic and concrete shape), the bytes it saves per step at
the shapes seen, and the totals. Logged at INFO for each training graph. The first time in a
process that a graph has transformer layers to recompute but no plan is on, it is logged at
WARNING instead, so users who never raise the log level learn that ORTMODULE_MEMORY_OPT_LEVEL=1
exists; graphs with op plans only (an MLP, a CNN) stay quiet at the default level, as every
successful run does. A line's first column is what a user copies into the config file.
"""

from __future__ import annotations

import logging
from collections import Counter

from .analysis import Candidates, Occurrence
from .plans import LAYER_PLAN, RECOMPUTE, RECOMPUTE_WITH_COMPROMISE, PlanConfig

logger = logging.getLogger("torch_ort_backend")
_warned_off = False


def _bytes(n: int) -> str:
    return f"{n:,}"


def _symbolic(activations: list) -> str:
    total = 0
    for a in activations:
        total = total + a.symbolic_nbytes
    return str(total)


def _covers(activations: list) -> str:
    groups = Counter(a.describe() for a in activations)
    return ", ".join(f"{d} x{n}" if n > 1 else d for d, n in groups.items())


def _compromise_covers(layers: list) -> list:
    kept = {n.name for occ in layers for n in occ.heavy_nodes}
    return [a for occ in layers for a in occ.activations if a.name not in kept]


def _row(config: str, on: bool, freq: str, activations: list, extra: str = "") -> list:
    lines = [f"  - {config:<40} {'ON ' if on else 'OFF'}  {freq:>7}  {_bytes(sum(a.nbytes for a in activations)):>16}"
             f"  {_symbolic(activations)}"]
    if extra:
        lines.append(f"      {extra}")
    if activations:
        lines.append(f"      stashed: {_covers(activations)}")
    return lines


def format_report(cands: Candidates, sel, before: int, after: int | None) -> str:
    applied_names = [n for n, occ in sel.applied.items() if occ]
    if applied_names:
        configs = ", ".join(str(PlanConfig(n, sel.configs[n].strategy, sel.configs[n].count)) for n in applied_names)
        head = f"Memory Optimizer: ON (memory_opt_level {sel.level}; plans {configs})"
    else:
        head = ("Memory Optimizer: OFF. Turn plans on with ORTMODULE_MEMORY_OPT_LEVEL=1 (or 2), or list them in a "
                "JSON file named by ORTMODULE_MEMORY_OPT_CONFIG; torch.compile / ORTModule options "
                "memory_opt_level and memory_opt_config (docs/memory_optimizer.md)")
    lines = [head]
    saved = f"  stashed activations: {_bytes(before)} bytes without plans"
    if after is not None:
        saved += f", {_bytes(after)} bytes with the plans on ({_bytes(before - after)} saved per step)"
    lines.append(saved + ", at the shapes seen")
    lines.append(f"    {'Plan (config syntax)':<40} State  {'Freq':>7}  {'Saving (bytes)':>16}"
                 "  Saving (symbolic bytes)")
    if cands.layers:
        lines += _layer_rows(cands, sel)
    for name, occurrences in sorted(cands.plans.items(), key=lambda kv: -sum(o.nbytes for o in kv[1])):
        applied = sel.applied.get(name, [])
        cfg = sel.configs.get(name)
        if applied:
            lines += _row(str(cfg), True, f"{len(applied)}/{len(occurrences)}",
                          [a for o in applied for a in o.activations])
        else:
            lines += _row(f"{name}:{RECOMPUTE}:-1", False, str(len(occurrences)),
                          [a for o in occurrences for a in o.activations])
    if sel.unmatched:
        lines.append("  configured plans this graph does not have: " + ", ".join(str(p) for p in sel.unmatched))
    total_on = sum(o.nbytes for occ in sel.applied.values() for o in occ)
    lines.append(f"  total saving of the plans on (estimated from the plans): {_bytes(total_on)} bytes")
    return "\n".join(lines)


def _layer_rows(cands: Candidates, sel) -> list:
    layers: list[Occurrence] = cands.layers
    where = f"layers: {layers[0].label} .. {layers[-1].label} ({cands.layer_class})"
    cfg = sel.configs.get(LAYER_PLAN)
    applied = sel.applied.get(LAYER_PLAN, [])
    rows = []
    for strategy in (RECOMPUTE, RECOMPUTE_WITH_COMPROMISE):
        if applied and cfg.strategy == strategy:
            covered = [a for o in applied for a in o.activations]
            if strategy == RECOMPUTE_WITH_COMPROMISE:
                covered = _compromise_covers(applied)
            rows += _row(str(cfg), True, f"{len(applied)}/{len(layers)}", covered, where)
        else:
            covered = [a for o in layers for a in o.activations]
            if strategy == RECOMPUTE_WITH_COMPROMISE:
                covered = _compromise_covers(layers)
            rows += _row(f"{LAYER_PLAN}:{strategy}:-1", False, str(len(layers)), covered, where)
    return rows


def log_report(cands: Candidates, sel, before: int, after: int | None) -> None:
    global _warned_off
    applied = sel.any_applied()
    if not applied and cands.layers and not _warned_off:
        _warned_off = True
        logger.warning(format_report(cands, sel, before, after))
    elif logger.isEnabledFor(logging.INFO):
        logger.info(format_report(cands, sel, before, after))
