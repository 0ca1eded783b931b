"""Recompute candidates of one joint forward/backward graph.

Input: the joint graph and the values AOTAutograd's min-cut partitioner chose to save for the
backward without any plan (level 0). Output: every plan that could free some of them.

- **Op clusters.** For each stashed activation, the forward ops that would have to run again in
  the backward to rebuild it from values that are stashed anyway (or are graph inputs): walk back
  from its producer through inputs that are neither. The cluster's op names, each followed by "+",
  name the plan (LayerNormalization+, Dropout+, Pow+Mul+Add+Mul+Tanh+); clusters of one name are
  that plan's occurrences, in forward order.
- **Transformer layers.** Modules of one class that are indexed children of one parent
  (``transformer.h.0``, ``transformer.h.1``... from the nodes' ``nn_module_stack``), at least two
  of them, each holding an attention (softmax or scaled-dot-product attention). Recomputing a layer
  keeps only what enters it; its outputs stay stashed.

Random ops are recomputable only where the RNG can be replayed (native_dropout: rng_replay.py);
ops outside the aten namespace, mutating ops and other random ops end a cluster.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch.fx.experimental.symbolic_shapes import optimization_hint

from .cluster_names import ATTENTION_OPS, COMPUTE_HEAVY, is_free, op_name, packet

aten = torch.ops.aten
MAX_CLUSTER_OPS = 24  # a longer cluster is a layer's worth of work: the TransformerLayer plan's job


@dataclass(frozen=True)
class Activation:
    """A stashed tensor: its name in the joint graph, symbolic and concrete shape, dtype, bytes."""

    name: str
    symbolic_shape: tuple
    shape: tuple
    dtype: torch.dtype
    nbytes: int
    symbolic_nbytes: object  # sympy expression, or an int for static shapes

    def describe(self) -> str:
        sym = "[" + ", ".join(str(d) for d in self.symbolic_shape) + "]"
        return f"{str(self.dtype).removeprefix('torch.')}{sym} {self.shape}"


@dataclass
class Occurrence:
    """One instance of a plan: the forward nodes it recomputes and the activations it frees."""

    nodes: list  # fx.Node, forward order
    activations: list  # Activation
    position: int  # forward position (of its last node): occurrences are counted in this order
    label: str = ""  # a layer's module path
    heavy_nodes: frozenset = frozenset()  # nodes of compute-bound ops (kept by a compromise)
    outputs: frozenset = frozenset()  # a layer's nodes that the forward reads outside it (kept stashed)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.activations)


@dataclass
class Candidates:
    plans: dict = field(default_factory=dict)  # plan name -> [Occurrence]
    layers: list = field(default_factory=list)  # [Occurrence], TransformerLayer, forward order
    layer_class: str = ""
    stashed: list = field(default_factory=list)  # every stashed activation (Activation)

    @property
    def stashed_bytes(self) -> int:
        return sum(a.nbytes for a in self.stashed)

    def empty(self) -> bool:
        return not self.plans and not self.layers


def _tensor(node: torch.fx.Node):
    v = node.meta.get("val")
    return v if isinstance(v, torch.Tensor) else None


def _hint(d) -> int:
    return int(optimization_hint(d, fallback=1)) if isinstance(d, torch.SymInt) else int(d)


def _expr(d):
    return d.node.expr if isinstance(d, torch.SymInt) else int(d)


def activation_of(node: torch.fx.Node) -> Activation | None:
    t = _tensor(node)
    if t is None:
        return None
    shape = tuple(_hint(d) for d in t.shape)
    numel = 1
    sym = 1
    for d, h in zip(t.shape, shape):
        numel *= h
        sym = sym * _expr(d)
    itemsize = t.dtype.itemsize
    return Activation(node.name, tuple(t.shape), shape, t.dtype, numel * itemsize, sym * itemsize)


def alias_root(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose memory `node` is (following views, detach and getitem of a view's tuple)."""
    while (node.op == "call_function" and is_free(node) and node.target is not operator.getitem
           and node.args and isinstance(node.args[0], torch.fx.Node)):
        node = node.args[0]
    return node


def is_random(node: torch.fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def recomputable(node: torch.fx.Node) -> bool:
    """Whether the backward may run this forward node again and get the same values."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        # As recomputable as the node it unpacks: a getitem of an op the backward may not run
        # again (flash attention's (out, logsumexp), seeded by its dropout) must be saved, or
        # torch's min-cut finds a value it can neither save (a tuple) nor recompute.
        source = node.args[0]
        return isinstance(source, torch.fx.Node) and recomputable(source)
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten" or target._schema.is_mutable:
        return False
    if is_random(node) and packet(target) is not aten.native_dropout:
        return False
    from torch.utils.checkpoint import CheckpointPolicy

    if node.meta.get("recompute") in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE):
        return False
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return all(v is None or isinstance(v, torch.Tensor) for v in vals)


def _grow_cluster(producer: torch.fx.Node, available: set, forward: set) -> list | None:
    """The forward nodes that rebuild `producer` from available values; None when a needed node
    cannot be recomputed or the cluster grows past MAX_CLUSTER_OPS ops."""
    cluster: set = set()
    stack = [producer]
    while stack:
        n = stack.pop()
        if n in cluster:
            continue
        if not recomputable(n) or n not in forward:
            return None
        cluster.add(n)
        if n.target is operator.getitem:
            stack.append(n.args[0])
        for u in n.all_input_nodes:
            if u.op == "placeholder" or alias_root(u) in available or isinstance(u.meta.get("val"), torch.SymInt):
                continue
            stack.append(u)
        if sum(1 for c in cluster if not is_free(c)) > MAX_CLUSTER_OPS:
            return None
    return list(cluster)


def _plan_name(nodes: Iterable[torch.fx.Node]) -> str:
    names = [op_name(n.target) for n in nodes if not is_free(n)]
    return "+".join(names) + "+" if names else ""


_INDEXED = re.compile(r"^(.*?)(?:\.|\[)(\d+)\]?$")


def _class_name(cls) -> str:
    return cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1].strip("'>")


def _clean_path(path: str) -> str:
    return re.sub(r"^L\['self'\]\.?", "", path).replace("._orig_mod", "")


def find_layers(forward_nodes: list) -> tuple[list[tuple[str, list]], str]:
    """[(module path, nodes)] of the transformer layers, forward order, and their class name."""
    groups: dict[tuple[str, str], dict[int, list]] = {}
    paths: dict[tuple[str, str, int], str] = {}
    for node in forward_nodes:
        stack = node.meta.get("nn_module_stack") or {}
        for path, cls in stack.values():
            m = _INDEXED.match(str(path))
            if not m:
                continue
            key = (m.group(1), _class_name(cls))
            groups.setdefault(key, {}).setdefault(int(m.group(2)), []).append(node)
            paths[(key[0], key[1], int(m.group(2)))] = str(path)
    chosen: list[tuple[tuple[str, str], dict[int, list]]] = []
    for key, members in sorted(groups.items(), key=lambda kv: len(kv[0][0])):
        if len(members) < 2:
            continue
        if not all(any(packet(n.target) in ATTENTION_OPS for n in nodes) for nodes in members.values()):
            continue
        if any(key[0].startswith(paths[(c[0], c[1], i)]) for c, m in chosen for i in m):
            continue  # inside a layer already chosen
        chosen.append((key, members))
    layers = []
    for key, members in chosen:
        for index, nodes in members.items():
            layers.append((_clean_path(paths[(key[0], key[1], index)]), nodes))
    order = {n: i for i, n in enumerate(forward_nodes)}
    layers.sort(key=lambda layer: min(order[n] for n in layer[1]))
    classes = sorted({key[1] for key, _ in chosen})
    return layers, ", ".join(classes)


def analyze(joint: torch.fx.GraphModule, saved_names: Iterable[str], forward_names: set,
            reader_names: set | None = None) -> Candidates:
    """Plans for `joint`, given the names of the values the level-0 partition saves, of the forward
    nodes (those computable without tangents) and of the nodes that make a layer's value one of its
    outputs by reading it (those the forward's outputs are computed from; default: every forward
    node)."""
    nodes = list(joint.graph.nodes)
    position = {n: i for i, n in enumerate(nodes)}
    by_name = {n.name: n for n in nodes}
    forward = {n for n in nodes if n.name in forward_names and n.op == "call_function"}
    readers = forward if reader_names is None else {n for n in nodes if n.name in reader_names}
    saved = [by_name[s] for s in saved_names if s in by_name]
    available = {alias_root(s) for s in saved}

    # Stashed activations: saved values computed by the forward (not inputs or views of inputs).
    stashed_roots: dict[torch.fx.Node, list] = {}
    for s in saved:
        root = alias_root(s)
        if root.op != "call_function" or root not in forward or _tensor(root) is None:
            continue
        stashed_roots.setdefault(root, []).append(s)
    cands = Candidates(stashed=[a for a in (activation_of(r) for r in stashed_roots) if a is not None])

    seen: set = set()
    for root in sorted(stashed_roots, key=position.get):
        producer = root.args[0] if root.target is operator.getitem else root
        cluster = _grow_cluster(producer, available - {root}, forward)
        if cluster is None:
            continue
        cluster.extend(u for n in list(cluster) for u in n.users if u.target is operator.getitem and u in forward)
        cluster = sorted(set(cluster), key=position.get)
        key = frozenset(cluster)
        if key in seen:
            continue
        seen.add(key)
        name = _plan_name(cluster)
        covered = [activation_of(r) for r in stashed_roots if r in key]
        if not name or not covered:
            continue
        cands.plans.setdefault(name, []).append(
            Occurrence(cluster, covered, max(position[n] for n in cluster)))
    for occurrences in cands.plans.values():
        occurrences.sort(key=lambda o: o.position)

    forward_order = [n for n in nodes if n in forward]
    layers, cands.layer_class = find_layers(forward_order)
    for path, layer_nodes in layers:
        members = set(layer_nodes)
        members.update(u for n in layer_nodes for u in n.users if u.target is operator.getitem and u in forward)
        ordered = sorted(members, key=position.get)
        heavy = frozenset(n for n in ordered if packet(n.target) in COMPUTE_HEAVY
                          or (n.target is operator.getitem and packet(n.args[0].target) in COMPUTE_HEAVY))
        outputs = frozenset(layer_outputs(ordered, readers))
        covered = [activation_of(r) for r in stashed_roots if r in members and r not in outputs]
        cands.layers.append(Occurrence(ordered, covered, max(position[n] for n in ordered), path, heavy, outputs))
    return cands


def layer_outputs(layer_nodes: list, forward: set) -> list:
    """Nodes of a layer that forward nodes outside it (or the graph's outputs) read: they stay
    stashed, so that recomputing one layer never needs the next one's values."""
    members = set(layer_nodes)
    return [n for n in layer_nodes if any(u not in members and (u in forward or u.op == "output") for u in n.users)]
