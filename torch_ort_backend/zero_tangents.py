"""A backward graph specialised for outputs that got no gradient: the tangent left out, not zeros.

A region's forward returns, say, the loss and the logits; the caller backpropagates the loss only.
Autograd then materialises a zero gradient for every output of the region's ``autograd.Function``
that got none (``ctx.materialize_grads``: GPT-2 at docs/memory_optimizer.md's size, a 16 MiB
``tangents_2`` of zeros), and the compiled backward adds it to the loss's gradient of the logits.
Eager autograd does neither: a gradient that is not defined is not computed with.

The lean training path (lean_call.py) turns materialisation off and, for each distinct set of
tangents that came as None, runs a variant of the backward graph built here once and cached: each
missing tangent's placeholder is removed, and what it fed is simplified as a zero flows:

- ops that give zeros when the zero is their operand (views and reshapes, ``mul``, ``div`` of a
  zero, ``neg``, ``sum``, matrix products, dtype copies) become zeros themselves;
- ``add(x, 0)``, ``add(0, x)`` and ``sub(x, 0)`` become ``x`` where ``x`` has the result's shape
  and dtype (no broadcast, no type promotion);
- a gradient the graph returns that is zero becomes None (no gradient, as eager autograd leaves
  a parameter that only the unused outputs read);
- any other reader of a zero gets a real one (``aten.zeros`` of the zero's shape and dtype),
  allocated in the engine as the graph runs, as correct as before and no leaner;

and the nodes left without readers are removed. ``x + 0`` is ``x`` bit for bit except that it
turns ``-0.0`` into ``+0.0``: the variant's gradients are those eager autograd computes without the
zero, and equal (``torch.equal``) to the full graph's with a zero tangent where that one's are not
zeros.
"""

from __future__ import annotations

from typing import Sequence

import torch

aten = torch.ops.aten

# ops whose result is all zeros when their first operand is (the rest: shapes, dims, dtypes)
_ZERO_IF_FIRST = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.expand.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.squeeze.default, aten.unsqueeze.default, aten.clone.default, aten.alias.default,
    aten.slice.Tensor, aten.select.int, aten._to_copy.default, aten.detach.default, aten.neg.default,
    aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.div.Tensor, aten.div.Scalar,
    aten.mul.Scalar, aten.contiguous.default,
}
# ops whose result is all zeros when either tensor operand is
_ZERO_IF_ANY = {aten.mul.Tensor, aten.mm.default, aten.bmm.default, aten.matmul.default}


def _same_meta(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and va.shape == vb.shape
            and va.dtype == vb.dtype and va.device == vb.device)


def _kept_operand(node: torch.fx.Node, zeros: set) -> torch.fx.Node | None:
    """For add / sub with one zero operand: the other operand, when it is the result unchanged."""
    if node.target not in (aten.add.Tensor, aten.sub.Tensor) or len(node.args) != 2:
        return None
    a, b = node.args
    alpha = node.kwargs.get("alpha", 1)
    if set(node.kwargs) - {"alpha"}:
        return None
    if b in zeros and a not in zeros and isinstance(a, torch.fx.Node):
        other = a
    elif node.target is aten.add.Tensor and a in zeros and b not in zeros and isinstance(b, torch.fx.Node) \
            and alpha == 1:
        other = b
    else:
        return None
    return other if _same_meta(other, node) else None


def _is_zero(node: torch.fx.Node, zeros: set) -> bool:
    if node.target in _ZERO_IF_FIRST:
        return bool(node.args) and node.args[0] in zeros
    if node.target in _ZERO_IF_ANY:
        return any(a in zeros for a in node.args[:2])
    if node.target in (aten.add.Tensor, aten.sub.Tensor):
        return len(node.args) == 2 and all(a in zeros for a in node.args)
    return False


def _materialise(graph: torch.fx.Graph, zero: torch.fx.Node) -> torch.fx.Node:
    """A real zero tensor of ``zero``'s shape and dtype, made where ``zero`` was."""
    val = zero.meta["val"]
    with graph.inserting_after(zero):
        node = graph.call_function(aten.zeros.default, (list(val.shape),),
                                   {"dtype": val.dtype, "layout": torch.strided, "device": val.device,
                                    "pin_memory": False})
    node.meta["val"] = val
    return node


def without_tangents(gm: torch.fx.GraphModule, positions: Sequence[int]) -> torch.fx.GraphModule:
    """A copy of the backward graph ``gm`` whose placeholders at ``positions`` (tangents that came
    as None) are gone, their zeros simplified away (the module docstring). Raises ValueError when a
    position is not a tensor placeholder."""
    graph = torch.fx.Graph()
    mapping: dict = {}
    out = graph.graph_copy(gm.graph, mapping)
    graph.output(out)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    zeros: set = set()
    for p in positions:
        if not 0 <= p < len(placeholders) or not isinstance(placeholders[p].meta.get("val"), torch.Tensor):
            raise ValueError(f"backward graph input {p} is not a tensor placeholder")
        zeros.add(placeholders[p])
    for node in list(graph.nodes):
        if node.op != "call_function" or not any(a in zeros for a in node.all_input_nodes):
            continue
        kept = _kept_operand(node, zeros)
        if kept is not None:
            node.replace_all_uses_with(kept)
            graph.erase_node(node)
        elif _is_zero(node, zeros):
            zeros.add(node)
    # a gradient that is zero is no gradient (None), as in eager autograd
    output = next(iter(graph.find_nodes(op="output")))
    if isinstance(output.args[0], (tuple, list)):
        output.args = (type(output.args[0])(None if a in zeros else a for a in output.args[0]),)
    # what still reads a zero (an op above does not know) reads a real one
    for zero in [n for n in graph.nodes if n in zeros]:
        readers = [u for u in zero.users if u not in zeros]
        if readers:
            real = _materialise(graph, zero)
            for u in readers:
                u.replace_input_with(zero, real)
    for node in reversed(list(graph.nodes)):
        if node in zeros and node.op != "placeholder" and not node.users:
            graph.erase_node(node)
    graph.eliminate_dead_code()
    for p in positions:
        if placeholders[p].users:  # an op that reads a zero only through another zero
            raise ValueError(f"backward graph input {p} is still read")
        graph.erase_node(placeholders[p])
    variant = torch.fx.GraphModule(gm, graph)
    variant.meta.update(getattr(gm, "meta", {}))
    return variant


__all__ = ["without_tangents"]
