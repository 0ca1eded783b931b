"""Dropout recomputed in the backward with the forward's random numbers.

When a recompute plan covers a native_dropout, torch's partitioner (functionalize_rng_ops) wraps the
forward call in ``run_and_save_rng_state`` (which also returns the generator state it started from)
and the backward's copy in ``run_with_rng_state`` (which runs it from that state, then puts the
generator back). Those are higher-order ops, which an ATen node cannot carry; here they become two
operators of our own, run by the engine as ATen nodes:

- ``tob_memopt::native_dropout_saving_rng_state(input, p, train) -> (rng_state, output, mask)``
- ``tob_memopt::native_dropout_replaying_rng_state(rng_state, input, p, train) -> (output, mask)``

The forward draws from torch's generator exactly as native_dropout alone would (the saved state
is read, not advanced), so every level draws the same masks as level 0, and the replay in the
backward leaves the generator where it was: later random ops see the same stream too.
"""

from __future__ import annotations

import operator
from typing import Optional

import torch
from torch import Tensor

aten = torch.ops.aten

_LIB = torch.library.Library("tob_memopt", "DEF")
_LIB.define("native_dropout_saving_rng_state(Tensor input, float p, bool? train) -> (Tensor, Tensor, Tensor)")
_LIB.define("native_dropout_replaying_rng_state(Tensor rng_state, Tensor input, float p, bool? train) "
            "-> (Tensor, Tensor)")


def _get_state(device: torch.device) -> Tensor:
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def _set_state(device: torch.device, state: Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state.cpu(), device)
    else:
        torch.set_rng_state(state.cpu())


def _dropout(input: Tensor, p: float, train: Optional[bool]) -> tuple[Tensor, Tensor]:
    out, mask = aten.native_dropout.default(input, p, train)
    # An operator's outputs may not alias its inputs (eval mode hands the input back).
    return (out.clone() if out is input else out), mask


def _saving(input: Tensor, p: float, train: Optional[bool]) -> tuple[Tensor, Tensor, Tensor]:
    state = _get_state(input.device)
    out, mask = _dropout(input, p, train)
    return state, out, mask


def _replaying(rng_state: Tensor, input: Tensor, p: float, train: Optional[bool]) -> tuple[Tensor, Tensor]:
    current = _get_state(input.device)
    _set_state(input.device, rng_state)
    try:
        return _dropout(input, p, train)
    finally:
        _set_state(input.device, current)


def _state_like(input: Tensor) -> Tensor:
    n = torch.cuda.get_rng_state().numel() if input.device.type == "cuda" else torch.get_rng_state().numel()
    return torch.empty((n,), dtype=torch.uint8, device="meta" if input.device.type == "meta" else "cpu")


def _saving_meta(input: Tensor, p: float, train: Optional[bool]) -> tuple[Tensor, Tensor, Tensor]:
    return _state_like(input), torch.empty_like(input), torch.empty_like(input, dtype=torch.bool)


def _replaying_meta(rng_state: Tensor, input: Tensor, p: float, train: Optional[bool]) -> tuple[Tensor, Tensor]:
    return torch.empty_like(input), torch.empty_like(input, dtype=torch.bool)


for _key in ("CPU", "CUDA"):
    _LIB.impl("native_dropout_saving_rng_state", _saving, _key)
    _LIB.impl("native_dropout_replaying_rng_state", _replaying, _key)
_LIB.impl("native_dropout_saving_rng_state", _saving_meta, "Meta")
_LIB.impl("native_dropout_replaying_rng_state", _replaying_meta, "Meta")

SAVING = torch.ops.tob_memopt.native_dropout_saving_rng_state.default
REPLAYING = torch.ops.tob_memopt.native_dropout_replaying_rng_state.default


def _hops():
    from torch._prims import rng_prims

    return rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state


class RngReplayError(RuntimeError):
    """A recomputed random op other than native_dropout (the analysis never plans one)."""


def replace_rng_wrappers(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule) -> int:
    """Rewrites the partitioner's run_and_save_rng_state / run_with_rng_state nodes into the two
    operators above; returns how many dropouts are replayed."""
    run_and_save, run_with = _hops()
    replaced = 0
    for node in list(fw.graph.nodes):
        if node.op != "call_function" or node.target is not run_and_save:
            continue
        op, *args = node.args
        _check(op, node)
        # users: getitem(node, 0) = the state, getitem(node, 1) = native_dropout's (output, mask)
        state_get = [u for u in node.users if u.args[1] == 0]
        result_get = [u for u in node.users if u.args[1] == 1]
        with fw.graph.inserting_before(node):
            new = fw.graph.call_function(SAVING, tuple(args), dict(node.kwargs))
            parts = {}
            for i in range(3):
                parts[i] = fw.graph.call_function(operator.getitem, (new, i))
        metas = [None, None, None]
        for g in state_get:
            metas[0] = g.meta.get("val")
            g.replace_all_uses_with(parts[0])
        for r in result_get:
            val = r.meta.get("val")
            if isinstance(val, (list, tuple)):
                metas[1], metas[2] = val[0], val[1]
            for inner in list(r.users):
                i = inner.args[1]
                metas[1 + i] = inner.meta.get("val", metas[1 + i])
                inner.replace_all_uses_with(parts[1 + i])
        for i, m in enumerate(metas):
            parts[i].meta["val"] = m
        new.meta["val"] = tuple(metas)
        new.meta["nn_module_stack"] = node.meta.get("nn_module_stack")
        _erase_tree(fw.graph, node)
        replaced += 1
    for node in list(bw.graph.nodes):
        if node.op != "call_function" or node.target is not run_with:
            continue
        state, op, *args = node.args
        _check(op, node)
        with bw.graph.inserting_before(node):
            new = bw.graph.call_function(REPLAYING, (state, *args), dict(node.kwargs))
        metas = [None, None]
        for u in node.users:
            metas[u.args[1]] = u.meta.get("val")
        new.meta["val"] = tuple(metas)
        node.replace_all_uses_with(new)
        bw.graph.erase_node(node)
    for gm in (fw, bw):
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return replaced


def _check(op, node: torch.fx.Node) -> None:
    if op is not aten.native_dropout.default:
        raise RngReplayError(f"node '{node.name}': recomputing the random op {op} is not supported "
                             "(only native_dropout replays its random numbers)")


def _erase_tree(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Erases `node` and the getitems below it once nothing reads them."""
    for u in list(node.users):
        for inner in list(u.users):
            if not inner.users:
                graph.erase_node(inner)
        if not u.users:
            graph.erase_node(u)
    if not node.users:
        graph.erase_node(node)
