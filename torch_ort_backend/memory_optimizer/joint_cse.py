"""Common-subexpression elimination of AOTAutograd's joint graph before it is partitioned.

torch's min-cut partitioner runs ``torch._functorch.compile_utils.fx_graph_cse`` first, which imports
``torch._inductor.pattern_matcher`` (and with it Inductor's lowering and kernel modules: about one
second of CPU in the first compile of a process, measured in docs/ortmodule.md, "On-disk cache") only
to tell the graph's mutation regions apart. A joint graph without mutating ops is one region, so this
pass does the same merging without that import: a node is replaced by an earlier node with the same
target and the same arguments (after replacement), except nodes that are random (their results must
differ), ``empty`` (undefined contents), aliases of a graph output's storage (the outputs stay distinct
tensors) and nodes defining an unbacked symbol (its uses downstream would name the erased one), the
exclusions torch's pass makes. A graph with a mutating op keeps torch's pass (``cse_joint`` returns
False).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten


def _mutates(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable


def _random(node: torch.fx.Node) -> bool:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return torch.Tag.nondeterministic_seeded in target.tags or target.overloadpacket is aten.empty


def _storage(node: torch.fx.Node) -> Any:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return StorageWeakRef(val.untyped_storage())
    except NotImplementedError:
        return None


def _defines_unbacked(node: torch.fx.Node) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return bool(free_unbacked_symbols(val))
    return False


def _key(node: torch.fx.Node, env: dict) -> Any:
    """(target, arguments with replaced nodes and their types), or None when unhashable."""
    flat, spec = tree_flatten((node.args, node.kwargs))
    parts = []
    for a in flat:
        if isinstance(a, torch.fx.Node):
            a = env[a]
        elif isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            a = a.node
        parts.append((a, type(a)))
    key = (node.target, tuple(parts), str(spec))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def cse_joint(gm: torch.fx.GraphModule) -> bool:
    """Merges the common subexpressions of `gm` in place; False (nothing done) when the graph mutates."""
    graph = gm.graph
    if any(_mutates(n) for n in graph.nodes if n.op == "call_function"):
        return False
    output = next(iter(graph.find_nodes(op="output")))
    output_storages = {s for s in (_storage(n) for n in output.all_input_nodes) if s is not None}
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    seen: dict[Any, torch.fx.Node] = {}
    for node in list(graph.nodes):
        env[node] = node
        if node.op != "call_function" or _random(node) or _defines_unbacked(node):
            continue
        if _storage(node) in output_storages:
            continue
        key = _key(node, env)
        if key is None:
            continue
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node
            continue
        env[node] = earlier
        node.replace_all_uses_with(earlier)
        graph.erase_node(node)
    gm.recompile()
    return True


__all__ = ["cse_joint"]
