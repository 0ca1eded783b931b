"""Live bytes through a saved (optimized) ONNX graph, node by node, as the engine's executor frees them.

    python tools/graph_liveness.py MODEL.onnx [--at NODE] [--top 20] [--held-prefix primals]
                                   [--per-layer OP]

Replays the graph's node order (the engine runs the model's order: docs/architecture.md) and
counts what is alive after each node: every output with a reader or that is a graph output,
views (Reshape, Identity, Squeeze, Unsqueeze, Flatten) as their base, a value freed after its last
reader. Feeds count from the start and are freed after their last reader (a training backward's
stash, donated), except those whose names start with --held-prefix (parameters, held by the
caller). Kernel scratch is not counted, so the figure is the engine's ``peak_live_bytes`` without
scratch; on GPT-2's level-1 backward at bench_memory.py's size it gives the engine's 200.1 MiB.

Prints the peak, the node it is at, and the largest values alive there (or at --at NODE);
--per-layer OP also prints the largest count between consecutive OP nodes (LayerNormalizationGrad:
each transformer layer's backward). Shapes come from the model's value_info (save_onnx writes
them); symbolic dimensions count as 1.
"""

from __future__ import annotations

import argparse

import onnx

VIEW_OPS = {"Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten"}


def _sizes(graph: onnx.GraphProto) -> dict[str, int]:
    sizes = {}
    for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
        t = vi.type.tensor_type
        count = 1
        for d in t.shape.dim:
            count *= d.dim_value if d.dim_value else 1
        sizes[vi.name] = count * onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize if t.elem_type else 0
    return sizes


def replay(graph: onnx.GraphProto, held_prefix: str, at: int | None = None):
    """(trace of (node index, op, live bytes), live values {name: bytes} after node `at`)."""
    sizes = _sizes(graph)
    base: dict[str, str] = {}

    def root(name: str) -> str:
        while name in base:
            name = base[name]
        return name

    last: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            if name:
                last[root(name)] = i
        if node.op_type in VIEW_OPS and node.input and node.input[0]:
            base[node.output[0]] = node.input[0]
    for out in graph.output:
        last[root(out.name)] = len(graph.node)
    live = {f.name: sizes.get(f.name, 0) for f in graph.input if f.name in last and not f.name.startswith(held_prefix)}
    total = sum(live.values())
    trace, snapshot = [], {}
    for i, node in enumerate(graph.node):
        for name in node.output:
            if not name or node.op_type in VIEW_OPS:
                continue
            if name in last:
                live[name] = sizes.get(name, 0)
                total += live[name]
        trace.append((i, node.op_type, total))
        if i == at:
            snapshot = dict(live)
        for name in set(node.input):
            r = root(name) if name else None
            if r is not None and last.get(r) == i and r in live:
                total -= live.pop(r)
    return trace, snapshot


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--at", type=int, default=None, help="show the values alive at this node (default: the peak)")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--held-prefix", default="primals", help="feeds held to the end (not donated)")
    p.add_argument("--per-layer", default="", metavar="OP", help="largest count between consecutive OP nodes")
    args = p.parse_args()
    graph = onnx.load(args.model).graph
    trace, _ = replay(graph, args.held_prefix)
    peak_index, peak_op, peak = max(trace, key=lambda t: t[2])
    at = peak_index if args.at is None else args.at
    _, live = replay(graph, args.held_prefix, at)
    producers = {out: node for node in graph.node for out in node.output}
    print(f"peak {peak / 2**20:.1f} MiB after node {peak_index} ({peak_op}); alive after node {at} "
          f"({graph.node[at].op_type}, {trace[at][2] / 2**20:.1f} MiB):")
    for name, size in sorted(live.items(), key=lambda kv: -kv[1])[: args.top]:
        producer = producers.get(name)
        print(f"  {size / 2**20:8.2f} MiB  {name}  ({producer.op_type if producer else 'feed'})")
    if args.per_layer:
        best, start = (0, 0, ""), 0
        for i, op, total in trace:
            best = max(best, (total, i, op))
            if op == args.per_layer:
                print(f"  nodes {start}-{i}: {best[0] / 2**20:.1f} MiB at node {best[1]} ({best[2]})")
                best, start = (0, 0, ""), i + 1


if __name__ == "__main__":
    main()
