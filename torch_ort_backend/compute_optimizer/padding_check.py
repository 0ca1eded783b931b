"""The run-time half of the embedding case's proof (embedding_sparsity.py): before each call, a cheap
check on the actual tensors decides whether the rewritten graph gives the dense graph's numbers; when
it does not, the call runs the dense graph (compiled beside it once, so a failing check never
recompiles), with a counter and a one-time message.

The probe is a small graph cut from dynamo's: the nodes that compute the token ids, the attention-mask
input, every attention's mask operands, the labels each loss reads and the row indices each
selection takes (all of them clean: they do not depend on the embedded tokens, so they cost what
building the masks costs, no layer). For each call it decides:

- no padding at all (every token valid): the dense graph runs, so a batch without padding costs
  only this check;
- every attention: for each valid query, every padded key is masked and some key is open. The
  scores chain between ``q @ k^T`` and the softmax is non-decreasing in the score (the pass admits
  only such ops: scaling by a non-negative number, adding a mask, where / masked_fill, casts), so
  evaluated at +L and -L (L = sqrt(finfo.max)) it bounds what any score |s| <= L gives: a masked
  key sits at or below finfo.min / 2, an open one at or above finfo.min / 4, and exp() of their
  difference is exactly 0. For SDPA the same with ``s * scale + mask``, a boolean mask, and
  ``is_causal``;
- every loss: labels at padded rows are the ignore index;
- every selection of rows (the label case's): it selects valid tokens only;
- every tensor multiplier of the scores is non-negative (positive for a divisor).

Anything else (NaN in a mask, a mask value between the two thresholds) fails the check: the dense
graph runs. The check never makes numbers differ; it only decides where the optimised graph may run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Callable

import torch
import torch.fx

from .token_states import Attention, Plan

logger = logging.getLogger("torch_ort_backend")


def _bound(dtype: torch.dtype) -> float:
    return math.sqrt(torch.finfo(dtype).max)


@dataclasses.dataclass
class _Outputs:
    """Where each quantity sits in the probe's output tuple."""
    attentions: list = dataclasses.field(default_factory=list)  # per attention: (hi, lo) or mask index
    positive: list = dataclasses.field(default_factory=list)  # per attention: [(index, strict)]
    losses: list = dataclasses.field(default_factory=list)
    gathers: list = dataclasses.field(default_factory=list)


def _ancestors(nodes: list[torch.fx.Node]) -> set[torch.fx.Node]:
    seen: set[torch.fx.Node] = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen


def _cut(gm: torch.fx.GraphModule, needed: list[torch.fx.Node]) -> tuple[torch.fx.Graph, dict]:
    """A graph taking `gm`'s inputs and holding copies of `needed` and their ancestors (no output yet)."""
    keep = _ancestors(needed)
    g = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder" or (node in keep and node.op != "output"):
            env[node] = g.node_copy(node, lambda a: env[a])
    return g, env


def _attention_key(att: Attention) -> tuple:
    """Attentions whose check reads the same values in the same way (the layers of one model share
    their mask) are checked once."""
    def arg(a: Any) -> Any:
        return ("node", a.name) if isinstance(a, torch.fx.Node) else ("value", repr(a))

    chain = tuple((n.op, str(n.target), pos, tuple(arg(a) for i, a in enumerate(n.args) if i != pos))
                  for n, pos in att.chain)
    return (att.kind, att.rank, att.bdim, att.qdim, att.kdim, str(att.dtype), chain,
            arg(att.mask) if att.mask is not None else None, att.is_causal, arg(att.scale),
            tuple((n.name, strict) for n, strict in att.positive))


class PaddingProbe:
    """Computes, per call, whether the rewritten graph may run (module docstring). Two graphs cut from
    dynamo's: the validity of the tokens (ids, attention mask: nearly free, and all a batch without
    padding costs), then the masks, labels and indices the conditions read."""

    def __init__(self, gm: torch.fx.GraphModule, plan: Plan) -> None:
        self.plan = plan
        self.padding_idx = plan.padding_idx
        tokens = [plan.ids] + ([plan.mask] if plan.mask is not None else [])
        g, env = _cut(gm, tokens)
        g.output(tuple(env[n] for n in tokens))
        self.tokens = torch.fx.GraphModule(gm, g)
        unique: dict[tuple, Attention] = {}
        for att in plan.attentions:
            unique.setdefault(_attention_key(att), att)
        self.attentions = list(unique.values())
        needed: list[torch.fx.Node] = []
        for att in self.attentions:
            if att.kind == "sdpa":
                needed += [att.mask] if att.mask is not None else []
            else:
                for node, pos in att.chain:
                    needed += [a for i, a in enumerate(node.args) if i != pos and isinstance(a, torch.fx.Node)]
            needed += [n for n, _ in att.positive]
        needed += [labels for labels, _ in plan.losses] + list(plan.gathers)
        g, env = _cut(gm, needed)
        outs: list[Any] = []
        where = _Outputs()
        for att in self.attentions:
            if att.kind == "sdpa":
                where.attentions.append((len(outs), len(outs) + 1))
                outs.append(env[att.mask] if att.mask is not None else None)
                outs.append(env[att.scale] if isinstance(att.scale, torch.fx.Node) else att.scale)
            else:
                hi_lo = []
                for sign in (1.0, -1.0):
                    x = g.call_function(torch.full, ((), sign * _bound(att.dtype)), {"dtype": att.dtype})
                    for node, pos in att.chain:
                        args = [x if i == pos else (env[a] if isinstance(a, torch.fx.Node) else a)
                                for i, a in enumerate(node.args)]
                        x = g.create_node(node.op, node.target, tuple(args), {})
                    hi_lo.append(len(outs))
                    outs.append(x)
                where.attentions.append(tuple(hi_lo))
            where.positive.append([])
            for n, strict in att.positive:
                where.positive[-1].append((len(outs), strict))
                outs.append(env[n])
        for labels, _ in plan.losses:
            where.losses.append(len(outs))
            outs.append(env[labels])
        for index in plan.gathers:
            where.gathers.append(len(outs))
            outs.append(env[index])
        g.output(tuple(outs))
        g.lint()
        self.conditions = torch.fx.GraphModule(gm, g)
        self.where = where

    def decide(self, args: Any) -> str:
        """"sparse" when the rewritten graph gives the dense numbers, "dense" when there is no padding,
        otherwise the reason the check failed."""
        with torch.no_grad():
            tokens = self.tokens(*args)
            ids = tokens[0]
            valid = torch.ones(ids.shape, dtype=torch.bool, device=ids.device)
            if self.padding_idx is not None:
                valid &= ids != self.padding_idx
            if len(tokens) > 1:
                valid &= tokens[1] != 0
            if bool(valid.all()):
                return "dense"
            outs = self.conditions(*args)
            flat = valid.reshape(-1)
            for att, at, positive in zip(self.attentions, self.where.attentions, self.where.positive):
                for index, strict in positive:
                    m = torch.as_tensor(outs[index])
                    if not bool((m > 0).all() if strict else (m >= 0).all()):
                        return f"a multiplier of the scores of {att.node} is not positive"
                why = _attention_masks_padding(att, at, outs, valid)
                if why:
                    return why
            for (labels, ignore), index in zip(self.plan.losses, self.where.losses):
                t = outs[index].reshape(-1)
                if bool((t[~flat] != ignore).any()):
                    return f"a padded token has a label other than the ignore index {ignore} ({labels.name})"
            for node, index in zip(self.plan.gathers, self.where.gathers):
                if not bool(flat[outs[index].reshape(-1)].all()):
                    return f"{node.name} selects a padded token"
        return "sparse"


def _attention_masks_padding(att: Attention, at: Any, outs: tuple, valid: torch.Tensor) -> str:
    """'' when, for every valid query, every padded key of `att` is masked and some key is open."""
    if att.kind == "sdpa":
        m, scale = outs[at[0]], outs[at[1]]
        if m is None:
            masked = torch.zeros((), dtype=torch.bool)
            open_ = torch.ones((), dtype=torch.bool)
        elif m.dtype == torch.bool:
            masked, open_ = ~m, m
        else:
            lo_limit = torch.finfo(m.dtype).min
            bound = _bound(m.dtype) * float(scale if scale is not None else 1.0)
            masked = (m + bound) <= lo_limit / 2
            open_ = (m - bound) >= lo_limit / 4
    else:
        hi, lo = outs[at[0]], outs[at[1]]
        lo_limit = torch.finfo(hi.dtype).min
        masked = hi <= lo_limit / 2
        open_ = lo >= lo_limit / 4
    masked, open_ = _to_bqk(masked, att), _to_bqk(open_, att)
    if att.kind == "sdpa" and att.is_causal:
        s = valid.shape[1]
        later = torch.ones(s, s, dtype=torch.bool, device=valid.device).triu(1)  # key after query
        masked = masked | later
        open_ = open_ & ~later
    # masked / open_: [B or 1, Sq or 1, Sk or 1] (heads and other dims reduced: all heads must mask)
    padded_key = ~valid[:, None, :]
    valid_query = valid[:, :, None]
    if bool((valid_query & padded_key & ~masked).any()):
        return f"the mask of {att.node} lets a valid query read a padded key"
    has_open = open_.any(-1)
    if bool((valid & ~has_open).any()):
        return f"the mask of {att.node} leaves a valid query no key to read"
    return ""


def _to_bqk(t: torch.Tensor, att: Attention) -> torch.Tensor:
    """A mask broadcast against the scores [..] as [batch, query, key] (other dims: all must hold)."""
    t = t.reshape((1,) * (att.rank - t.dim()) + tuple(t.shape))
    others = [d for d in range(att.rank) if d not in (att.bdim, att.qdim, att.kdim)]
    t = t.permute(att.bdim, att.qdim, att.kdim, *others)
    return t.reshape(*t.shape[:3], -1).all(-1)


def dispatcher(probe: PaddingProbe, sparse: Callable, dense: Callable, stats: Any, name: str) -> Callable:
    """The callable the backend returns: the probe's decision picks the compiled graph per call."""
    boxed = bool(getattr(sparse, "_boxed_call", False))
    if boxed != bool(getattr(dense, "_boxed_call", False)):
        raise RuntimeError("the optimised and the dense graph have different calling conventions")
    warned = []

    def run(*call_args: Any) -> Any:
        # the same calling convention as the compiled graphs: one list of arguments, or the arguments
        args = call_args[0] if len(call_args) == 1 and isinstance(call_args[0], list) else call_args
        try:
            decision = probe.decide(args)
        except Exception as e:  # the dense graph is always right
            decision = f"the check itself failed ({type(e).__name__}: {e})"
        if decision == "sparse":
            stats.embedding_sparse_calls += 1
            return sparse(*call_args)
        if decision == "dense":
            stats.embedding_dense_calls += 1
        else:
            stats.embedding_check_failures += 1
            stats.embedding_failure_reasons[decision] += 1
            if not warned:
                warned.append(True)
                logger.warning("compute optimizer: %s runs its dense graph: %s (counted in "
                               "compute_optimizer.STATS.embedding_check_failures; this message is shown once)",
                               name, decision)
        return dense(*call_args)

    wrapped = torch._disable_dynamo(run)
    if boxed:
        wrapped._boxed_call = True
    return wrapped


__all__ = ["PaddingProbe", "dispatcher"]
