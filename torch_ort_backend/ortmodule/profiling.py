"""Per-node times of the compiled graphs: the engine's profiler, written and summarised on demand.

Graphs compiled with the ``enable_profiling`` option (``ORTModule(model, options={"enable_profiling":
True})`` or ``torch.compile(..., options={"enable_profiling": True})``) record every node's time.
end_profiling() writes one Chrome trace per session (chrome://tracing, Perfetto) and logs, at
VERBOSE, the time per op type of each.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections import defaultdict

from ..compiled_graph import live_graphs

logger = logging.getLogger("torch_ort_backend")

_SUMMARY_ROWS = 15


def end_profiling(directory: str | None = None) -> list[str]:
    """Writes the profile of every live compiled graph that profiles, as
    ``<onnx_prefix or 'tob'>_<stage>_<n>_profile.json`` in `directory` (default: the graph's
    save_path, else the working directory); returns the paths. Events accumulate over the runs, so a
    later call writes the runs so far again."""
    paths = []
    seen = set()
    for graph in live_graphs():
        session = graph.session
        if session is None or id(session) in seen or not session.get_session_options().enable_profiling:
            continue
        seen.add(id(session))
        written = session.end_profiling()
        if not written:
            continue
        target_dir = directory or graph.opts.save_path or os.getcwd()
        os.makedirs(target_dir, exist_ok=True)
        target = os.path.join(target_dir, f"{graph.opts.onnx_prefix or 'tob'}_{graph.name}_profile.json")
        shutil.move(written, target)
        paths.append(target)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("profile of %s (%s):\n%s", graph.name, target, summarize(target))
    return paths


def summarize(trace_path: str, rows: int = _SUMMARY_ROWS) -> str:
    """Time per op type in one Chrome trace written by the engine, most expensive first."""
    with open(trace_path) as f:
        events = json.load(f)
    total_us: dict[str, int] = defaultdict(int)
    calls: dict[str, int] = defaultdict(int)
    runs = 0
    for event in events:
        if event.get("cat") == "Node":
            op = event.get("args", {}).get("op_type", "?")
            total_us[op] += int(event.get("dur", 0))
            calls[op] += 1
        elif event.get("name") == "run":
            runs += 1
    grand = sum(total_us.values()) or 1
    lines = [f"{runs} runs, {grand / 1000.0:.3f} ms in nodes"]
    for op, us in sorted(total_us.items(), key=lambda item: -item[1])[:rows]:
        lines.append(f"  {op:<28} {calls[op]:>7} calls {us / 1000.0:>10.3f} ms {100.0 * us / grand:>6.1f}%")
    return "\n".join(lines)
