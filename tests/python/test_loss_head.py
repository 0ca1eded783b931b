"""The loss head without its [tokens, vocab] log-probabilities (memory_optimizer/loss_head.py): the
joint graph's log_softmax + nll_loss and its gradient become tob_loss::cross_entropy_lse /
_backward, which the engine runs as ai.tob::SoftmaxCrossEntropyLse / Grad. Losses and gradients
against eager PyTorch in float64 and float32, ignore_index, all-ignored batches, the label-gather
fold, every memory_opt_level identical, bad labels named, and the forward holding less."""

from __future__ import annotations

import functools
import gc

import pytest
import torch
import torch.nn.functional as F

from torch_ort_backend.compiled_graph import live_graphs
from torch_ort_backend.memory_optimizer import loss_head
from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2, make_llama
from memory_optimizer_harness import assert_identical, graph_memory, train
from ortmodule_helpers import fresh_state

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    gc.collect()
    for g in live_graphs():
        if getattr(g, "memory", None) is not None:
            g.memory.runs = 0
    yield from fresh_state(monkeypatch)


def _labels(n: int, c: int, ignored_every: int | None, gen: torch.Generator) -> torch.Tensor:
    t = torch.randint(0, c, (n,), generator=gen)
    if ignored_every:
        t[::ignored_every] = -100
    return t


# --- the operators' torch implementations (the eager fallback) against float64 F.cross_entropy ----

@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("ignored_every", [None, 3])
def test_torch_implementation_matches_cross_entropy_in_float64(reduction, ignored_every):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(12, 37, generator=gen, dtype=torch.float64) * 3
    t = _labels(12, 37, ignored_every, gen)
    red = {0: "none", 1: "mean", 2: "sum"}[reduction]
    xr = x.clone().requires_grad_()
    ref = F.cross_entropy(xr, t, ignore_index=-100, reduction=red)
    g = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    ref.backward(g)
    loss, lse = loss_head.CROSS_ENTROPY(x, t, reduction, -100)
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-12, atol=1e-12)
    valid = t != -100
    torch.testing.assert_close(lse[valid], torch.logsumexp(x[valid], 1), rtol=1e-12, atol=1e-12)
    dx = loss_head.CROSS_ENTROPY_BACKWARD(g, x, t, lse, reduction, -100)
    torch.testing.assert_close(dx, xr.grad, rtol=1e-12, atol=1e-12)


def test_torch_implementation_names_bad_labels():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"cross_entropy_lse: target 4 is outside \[0, 4\)"):
        loss_head.CROSS_ENTROPY(x, torch.tensor([0, 4, 1]), 1, -100)
    with pytest.raises(ValueError, match="target must be int32/int64"):
        loss_head.CROSS_ENTROPY(x, torch.tensor([0.0, 1.0, 1.0]), 1, -100)
    with pytest.raises(ValueError, match="scores must be float32/float64"):
        loss_head.CROSS_ENTROPY(x.half(), torch.tensor([0, 1, 1]), 1, -100)


# --- compiled: the engine runs the fused kernels ---------------------------------------------------

class Head(torch.nn.Module):
    """A language model's head: hidden -> vocabulary, then cross-entropy over the tokens."""

    def __init__(self, hidden=16, vocab=64, dtype=torch.float32, reduction="mean"):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(hidden, hidden).to(dtype)
        self.out = torch.nn.Linear(hidden, vocab).to(dtype)
        self.reduction = reduction

    def forward(self, h, labels):
        logits = self.out(torch.tanh(self.proj(h)))
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100,
                               reduction=self.reduction)
        return loss, logits


def _graph_ops(stage: str) -> list[str]:
    """The op types of the ONNX graphs of `stage` that this process exported and still holds."""
    ops = []
    for g in live_graphs():
        if g.stage == stage and g.exported is not None and g.memory is not None and g.memory.runs:
            ops += [n.op_type for n in g.exported.model.graph.node]
    return ops


def _run(model, h, labels, backend=True):
    fn = torch.compile(model, backend="ort") if backend else model
    model.zero_grad(set_to_none=True)
    h = h.clone().requires_grad_()
    loss, logits = fn(h, labels)
    (loss.sum() if loss.dim() else loss).backward()
    return loss.detach(), h.grad, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_compiled_loss_matches_eager_and_runs_fused(dtype, tol, reduction):
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(3, 20, 16, generator=gen, dtype=dtype)
    labels = _labels(60, 64, 4, gen).view(3, 20)
    model = Head(dtype=dtype, reduction=reduction)
    ref = _run(model, h, labels, backend=False)
    got = _run(model, h, labels)
    for a, b in zip((got[0], got[1], *got[2].values()), (ref[0], ref[1], *ref[2].values())):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    fw, bw = _graph_ops("forward"), _graph_ops("backward")
    assert "SoftmaxCrossEntropyLse" in fw and "LogSoftmax" not in fw and "NegativeLogLikelihoodLoss" not in fw, fw
    assert "SoftmaxCrossEntropyLseGrad" in bw and "LogSoftmaxGrad_13" not in bw, bw


def test_every_label_ignored_gives_eagers_nan_and_zero_gradients():
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(2, 5, 16, generator=gen)
    labels = torch.full((2, 5), -100)
    model = Head()
    ref = _run(model, h, labels, backend=False)
    got = _run(model, h, labels)
    assert torch.isnan(got[0]) and torch.isnan(ref[0])
    assert "SoftmaxCrossEntropyLse" in _graph_ops("forward")
    # eager's gradients are NaN too (0 / 0 scale) or zero; ours must be the same where eager's are finite
    for a, b in zip((got[1], *got[2].values()), (ref[1], *ref[2].values())):
        torch.testing.assert_close(a, b, equal_nan=True)


def test_a_label_outside_the_vocabulary_is_an_error_naming_it():
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(2, 5, 16, generator=gen)
    model = Head()
    good = _labels(10, 64, None, gen).view(2, 5)
    _run(model, h, good)  # compiled and run once
    bad = good.clone()
    bad[1, 2] = 64
    with pytest.raises(Exception, match=r"outside the class range \[0, 64\)|outside \[0, 64\)"):
        _run(model, h, bad)


def test_the_switch_keeps_the_log_softmax(monkeypatch):
    monkeypatch.setenv("TOB_LOSS_HEAD_FUSION", "0")
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(4)
    h = torch.randn(2, 5, 16, generator=gen)
    labels = _labels(10, 64, 3, gen).view(2, 5)
    _run(Head(), h, labels)
    fw = _graph_ops("forward")
    assert "SoftmaxCrossEntropyLse" not in fw and "LogSoftmax" in fw, fw


# --- the models: levels identical, the label gather folded, the forward holds less ------------------

MODELS = {
    "gpt2": functools.partial(make_gpt2, layers=2, dropout=0.1, vocab=1024),
    "llama": functools.partial(make_llama, layers=2, dropout=0.1, vocab=1024),
}


def _saved_log_softmax_or_gather() -> list:
    found = []
    for g in live_graphs():
        if g.stage != "forward" or g.gm is None or not g.memory.runs:
            continue
        for n in g.gm.graph.nodes:
            if n.op == "call_function" and n.target in (aten._log_softmax.default, aten.index_select.default):
                found.append(n)
    return found


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_train_with_the_fused_head_at_every_level(name, monkeypatch):
    """Levels 1 and 2 stay bit for bit level 0 with the fused head; level 0 agrees with the unfused
    head within float32's rounding; the forward runs no log-softmax and gathers no label rows (the
    compute optimizer's gather of the valid labels' rows is folded into the loss), and its peak
    drops by at least one of the two [tokens, vocab] tensors it held there (the gathered rows, their
    log-softmax)."""
    model = MODELS[name]()
    batch, seq, vocab = 4, 32, 1024  # the head dominates the forward: its peak is there
    make_batch = functools.partial(causal_lm_batch, batch=batch, seq=seq, vocab=vocab)
    level0 = train(model, make_batch, {"memory_opt_level": 0})
    assert _saved_log_softmax_or_gather() == []
    assert "SoftmaxCrossEntropyLse" in _graph_ops("forward")
    fused_peak = graph_memory(level0, "forward")["peak_live_bytes"]
    for level in (1, 2):
        assert_identical(level0, train(model, make_batch, {"memory_opt_level": level}), f"{name} level {level}")
    monkeypatch.setenv("TOB_LOSS_HEAD_FUSION", "0")
    plain = train(model, make_batch, {"memory_opt_level": 0})
    assert _saved_log_softmax_or_gather(), "without the rewrite the forward computes the log-softmax"
    for a, b in zip(level0.losses, plain.losses):
        torch.testing.assert_close(a, b, rtol=2e-6, atol=2e-6)
    for ga, gb in zip(level0.grads, plain.grads):
        for k in ga:
            torch.testing.assert_close(ga[k], gb[k], rtol=1e-4, atol=2e-6)
    plain_peak = graph_memory(plain, "forward")["peak_live_bytes"]
    # the rows with a real label in the last step's batch (peaks are the last run's): the shifted
    # labels, padding ignored
    valid = int((make_batch(1)["labels"][:, 1:] != -100).sum())
    # the unfused peak holds the gathered rows and their log-softmax beside the logits; the fused
    # forward's own peak is then elsewhere (at the head's product), so at least one of them is gone
    assert plain_peak - fused_peak >= valid * vocab * 4, (plain_peak, fused_peak, valid)


def test_the_logits_the_fused_head_reads_again_are_donated_to_the_backward(monkeypatch):
    """The fused head's backward reads the logits, which the forward also returns: torch leaves such
    a saved value out of its donated buffers (the caller may hold it), so it would stay alive to the
    backward's end even when the caller dropped it. The partition marks it (partition.py
    mark_saved_outputs) and the backward donates it with the rest of its stash: every saved byte is
    donated from the second step on, and the losses and gradients do not change."""
    from torch_ort_backend.memory_optimizer import partition

    model = MODELS["llama"]()
    make_batch = functools.partial(causal_lm_batch, batch=2, seq=16, vocab=1024)
    run = train(model, make_batch, {"memory_opt_level": 1}, steps=3)
    bw = graph_memory(run, "backward")
    assert bw["donated_bytes"] == bw["saved_bytes"] > 0, bw
    monkeypatch.setattr(partition, "mark_saved_outputs", lambda *args: 0)
    gc.collect()
    for g in live_graphs():
        g.memory.runs = 0
    plain = train(model, make_batch, {"memory_opt_level": 1}, steps=3)
    assert_identical(plain, run, "llama level 1 without the logits donated")
    bw_plain = graph_memory(plain, "backward")
    logits = 2 * 16 * 1024 * 4
    assert bw_plain["saved_bytes"] - bw_plain["donated_bytes"] >= logits, bw_plain
