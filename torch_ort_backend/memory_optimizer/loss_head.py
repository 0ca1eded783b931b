"""The loss head without its [tokens, vocab] log-probabilities: a joint-graph rewrite of
cross-entropy into two operators of our own that the engine runs as one kernel each.

AOTAutograd writes ``F.cross_entropy(logits, labels)`` as ``lp = _log_softmax(x, 1)``,
``nll_loss_forward(lp, t, None, reduction, ignore_index)`` and, in the backward,
``_log_softmax_backward_data(nll_loss_backward(g, lp, t, ...), lp, 1)``. The forward then holds the
[N, C] log-probabilities beside the logits at its peak, and stashes them for the backward. Here the
group becomes

- ``tob_loss::cross_entropy_lse(x, t, reduction, ignore_index) -> (loss, lse)``: per row the
  log-sum-exp of the scores and the loss ``lse - x[t]``, no [N, C] output
  (engine: ``ai.tob::SoftmaxCrossEntropyLse``);
- ``tob_loss::cross_entropy_lse_backward(g, x, t, lse, reduction, ignore_index) -> dx``:
  ``(exp(x - lse) - onehot(t)) * scale`` (``ai.tob::SoftmaxCrossEntropyLseGrad``),

so the backward reads the scores (the model's logits, which the caller holds anyway) and an [N]
vector instead of a stashed [N, C] copy.

The compute optimizer's label case (compute_optimizer/label_sparsity.py) gathers the rows whose
label is not ignored before the loss (``index_select(x, 0, nonzero(labels != ii))``) and scatters the
gradient back (``index_add`` into zeros). The fused loss skips ignored rows itself, so where the
gather is exactly that one it is folded away: the loss reads the logits' rows in place and its
gradient is the logits' whole gradient (ignored rows zero, as the scatter left them), without the
gathered [valid, C] copy or the scattered one.

The rewrite runs on the joint graph before the partition, at every memory_opt_level, so levels
stay identical to each other; against eager the losses and gradients agree within float32's
rounding (the fused kernel's exp(x - lse) rounds once where log_softmax's chain rounds twice).
``TOB_LOSS_HEAD_FUSION=0`` turns it off (A/B runs). Conditions: float32/float64 [N, C] scores, the
softmax over the classes (dim 1), no class weights, integer reduction and ignore_index, and the
log-probabilities read by nothing but the loss and its gradient.
"""

from __future__ import annotations

import operator
import os
from typing import Optional

import torch
from torch import Tensor

aten = torch.ops.aten

_LIB = torch.library.Library("tob_loss", "DEF")
_LIB.define("cross_entropy_lse(Tensor self, Tensor target, int reduction, int ignore_index) -> (Tensor, Tensor)")
_LIB.define("cross_entropy_lse_backward(Tensor grad_output, Tensor self, Tensor target, Tensor lse, int reduction, "
            "int ignore_index) -> Tensor")

_NONE, _MEAN, _SUM = 0, 1, 2  # torch's reduction enum, as nll_loss_forward takes it


def _check(x: Tensor, target: Tensor, reduction: int, op: str) -> None:
    if x.dim() != 2 or x.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"tob_loss::{op}: scores must be float32/float64 [N, C], got {x.dtype} {list(x.shape)}")
    if target.dtype not in (torch.int32, torch.int64) or target.dim() != 1:
        raise ValueError(f"tob_loss::{op}: target must be int32/int64 [N], got {target.dtype} {list(target.shape)}")
    if reduction not in (_NONE, _MEAN, _SUM):
        raise ValueError(f"tob_loss::{op}: reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction}")


def _rows(x: Tensor, target: Tensor, ignore_index: int, op: str) -> tuple[Tensor, Tensor]:
    valid = target != ignore_index
    bad = valid & ((target < 0) | (target >= x.shape[1]))
    if bool(bad.any()):
        raise ValueError(f"tob_loss::{op}: target {int(target[bad][0])} is outside [0, {x.shape[1]}) and is not "
                         f"ignore_index {ignore_index}")
    return valid, torch.where(valid, target, torch.zeros_like(target)).long()


def _forward(x: Tensor, target: Tensor, reduction: int, ignore_index: int) -> tuple[Tensor, Tensor]:
    """torch's implementation (a graph the engine does not run, the eager fallback)."""
    _check(x, target, reduction, "cross_entropy_lse")
    valid, t = _rows(x, target, ignore_index, "cross_entropy_lse")
    lse = torch.where(valid, torch.logsumexp(x, 1), torch.zeros((), dtype=x.dtype, device=x.device))
    rows = torch.where(valid, lse - x.gather(1, t[:, None]).squeeze(1), torch.zeros((), dtype=x.dtype, device=x.device))
    if reduction == _NONE:
        return rows, lse
    total = rows.double().sum()
    if reduction == _MEAN:
        total = total / valid.sum()
    return total.to(x.dtype), lse


def _backward(grad_output: Tensor, x: Tensor, target: Tensor, lse: Tensor, reduction: int,
              ignore_index: int) -> Tensor:
    _check(x, target, reduction, "cross_entropy_lse_backward")
    valid, t = _rows(x, target, ignore_index, "cross_entropy_lse_backward")
    dx = torch.exp(x - lse[:, None])
    dx.scatter_add_(1, t[:, None], torch.full_like(lse[:, None], -1.0))
    if reduction == _NONE:
        scale = grad_output[:, None]
    elif reduction == _SUM:
        scale = grad_output
    else:
        scale = grad_output / valid.sum()
    return torch.where(valid[:, None], dx * scale, torch.zeros((), dtype=x.dtype, device=x.device))


def _forward_meta(x: Tensor, target: Tensor, reduction: int, ignore_index: int) -> tuple[Tensor, Tensor]:
    loss = x.new_empty((x.shape[0],) if reduction == _NONE else ())
    return loss, x.new_empty((x.shape[0],))


def _backward_meta(grad_output: Tensor, x: Tensor, target: Tensor, lse: Tensor, reduction: int,
                   ignore_index: int) -> Tensor:
    return torch.empty_like(x)


_LIB.impl("cross_entropy_lse", _forward, "CompositeExplicitAutograd")
_LIB.impl("cross_entropy_lse_backward", _backward, "CompositeExplicitAutograd")
_LIB.impl("cross_entropy_lse", _forward_meta, "Meta")
_LIB.impl("cross_entropy_lse_backward", _backward_meta, "Meta")

CROSS_ENTROPY = torch.ops.tob_loss.cross_entropy_lse.default
CROSS_ENTROPY_BACKWARD = torch.ops.tob_loss.cross_entropy_lse_backward.default


def enabled() -> bool:
    return os.environ.get("TOB_LOSS_HEAD_FUSION", "1") != "0"


# --- the rewrite --------------------------------------------------------------------------------

def _val(n) -> Optional[Tensor]:
    v = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
    return v if isinstance(v, Tensor) else None


def _undetach(n):
    while isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is aten.detach.default:
        n = n.args[0]
    return n


def _readers(n) -> list:
    """The readers of n through detach chains (the joint graph reads saved values through detach),
    with the detach nodes themselves in `chain`."""
    out, stack = [], list(n.users)
    while stack:
        u = stack.pop()
        if u.op == "call_function" and u.target is aten.detach.default:
            stack.extend(u.users)
        else:
            out.append(u)
    return out


def _same_size(a, b) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    try:
        return bool(statically_known_true(a == b))
    except Exception:
        return False


def _label_gather(x, target, ignore_index):
    """(scores, labels, index) where x = index_select(scores, 0, index) and target =
    index_select(labels, 0, index) with index = nonzero(labels != ignore_index) (a view of it):
    the rows of the non-ignored labels, which the fused loss may read in place."""
    if not (x.op == "call_function" and x.target is aten.index_select.default and x.args[1] == 0
            and target.op == "call_function" and target.target is aten.index_select.default
            and target.args[1] == 0 and x.args[2] is target.args[2] and len(x.users) == 1):
        return None
    scores, labels, index = x.args[0], target.args[0], x.args[2]
    nz = index
    while nz.op == "call_function" and nz.target in (aten.view.default, aten.reshape.default,
                                                       aten.squeeze.dim, aten.squeeze.default, aten._unsafe_view.default):
        nz = nz.args[0]
    if not (nz.op == "call_function" and nz.target is aten.nonzero.default):
        return None
    ne = nz.args[0]
    if not (ne.op == "call_function" and ne.target is aten.ne.Scalar and ne.args[0] is labels
            and ne.args[1] == ignore_index):
        return None
    sv, lv = _val(scores), _val(labels)
    if sv is None or lv is None or sv.dim() != 2 or lv.dim() != 1 or not _same_size(sv.shape[0], lv.shape[0]):
        return None
    return scores, labels, index


def _scatter_of(dx, index):
    """The index_add(zeros, 0, index, dx) that scatters the gathered rows' gradient back, if that is
    dx's only real reader (a new_zeros that only takes dx's shape may read it too)."""
    adds = [u for u in dx.users if u.op == "call_function" and u.target is aten.index_add.default]
    others = [u for u in dx.users if u not in adds]
    if len(adds) != 1:
        return None
    add = adds[0]
    zeros = add.args[0]
    if not (add.args[1] == 0 and add.args[2] is index and add.args[3] is dx and len(add.args) == 4
            and not add.kwargs and zeros.op == "call_function" and zeros.target is aten.new_zeros.default
            and len(zeros.users) == 1):
        return None
    if any(o is not zeros for o in others):
        return None
    return add


def fuse_loss_heads(joint: torch.fx.GraphModule) -> int:
    """Rewrites each log_softmax + nll_loss group of the joint graph (above); returns how many."""
    if not enabled():
        return 0
    graph = joint.graph
    fused = 0
    for ls in list(graph.find_nodes(op="call_function", target=aten._log_softmax.default)):
        if _rewrite(graph, ls):
            fused += 1
    if fused:
        graph.eliminate_dead_code()
        graph.lint()
        joint.recompile()
    return fused


def _rewrite(graph: torch.fx.Graph, ls) -> bool:
    x, dim, half_to_float = ls.args
    xv = _val(x)
    if half_to_float or xv is None or xv.dim() != 2 or xv.dtype not in (torch.float32, torch.float64) \
            or dim not in (1, -1):
        return False
    readers = _readers(ls)
    fwds = [r for r in readers if r.target is aten.nll_loss_forward.default]
    bwds = [r for r in readers if r.target is aten.nll_loss_backward.default]
    grads = [r for r in readers if r.target is aten._log_softmax_backward_data.default]
    if len(fwds) != 1 or len(bwds) > 1 or len(grads) != len(bwds) or len(readers) != 1 + 2 * len(bwds):
        return False
    f = fwds[0]
    _, target, weight, reduction, ignore_index = f.args
    if weight is not None or not isinstance(reduction, int) or not isinstance(ignore_index, int) \
            or _undetach(f.args[0]) is not ls:
        return False
    tv = _val(target)
    if tv is None or tv.dim() != 1 or tv.dtype not in (torch.int32, torch.int64):
        return False
    outs = {u.args[1]: u for u in f.users}
    if not all(u.target is operator.getitem for u in f.users) or len(outs) != len(f.users):
        return False
    total = outs.get(1)
    b = d = None
    if bwds:
        b, d = bwds[0], grads[0]
        g, _, bt, bw, bred, bii, btotal = b.args
        if not (_undetach(b.args[1]) is ls and bt is target and bw is None and bred == reduction
                and bii == ignore_index and btotal is total and list(b.users) == [d] and d.args[0] is b
                and _undetach(d.args[1]) is ls and d.args[2] in (1, -1) and d.args[3] == xv.dtype):
            return False
    if total is not None and any(u is not b for u in total.users):
        return False

    scores, labels, scatter = x, target, None
    folded = _label_gather(x, target, ignore_index)
    if folded is not None and d is not None:
        scatter = _scatter_of(d, folded[2])
        if scatter is not None:
            scores, labels = folded[0], folded[1]
    elif folded is not None:
        scores, labels = folded[0], folded[1]
    sv = _val(scores)

    with graph.inserting_before(f):
        ce = graph.call_function(CROSS_ENTROPY, (scores, labels, reduction, ignore_index))
        loss = graph.call_function(operator.getitem, (ce, 0))
        lse = graph.call_function(operator.getitem, (ce, 1))
    for k, v in f.meta.items():
        ce.meta.setdefault(k, v)
    loss_val = outs[0].meta.get("val") if 0 in outs else None
    lse_val = sv.new_empty((sv.shape[0],))
    ce.meta["val"] = (loss_val, lse_val)
    for node, val in ((loss, loss_val), (lse, lse_val)):
        node.meta.update({k: v for k, v in f.meta.items() if k != "val"})
        node.meta["val"] = val
    if 0 in outs:
        outs[0].replace_all_uses_with(loss)
    if d is not None:
        last = scatter if scatter is not None else d
        with graph.inserting_before(last):
            dx = graph.call_function(CROSS_ENTROPY_BACKWARD, (b.args[0], scores, labels, lse, reduction, ignore_index))
        dx.meta.update({k: v for k, v in last.meta.items()})
        last.replace_all_uses_with(dx)
    return True


__all__ = ["CROSS_ENTROPY", "CROSS_ENTROPY_BACKWARD", "enabled", "fuse_loss_heads"]
