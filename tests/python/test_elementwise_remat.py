"""The engine's ElementwiseRematerialization in compiled training (docs/architecture.md, "Elementwise
rematerialization"; docs/memory_optimizer.md, "A recomputed layer's GELU gradient from x alone"): with
every GPT-2 layer recomputed (plan TransformerLayer:1:-1) the GELU gradient's fused node recomputes
the GELU's pieces from its input instead of reading four tensors the recompute wrote for it, so the
backward's engine peak falls, and training gives the same losses and gradients as with the pass off
(TOB_ELEMENTWISE_REMAT=0), bit for bit (small GPT-2, dropout on, two SGD steps)."""

from __future__ import annotations

import copy
import functools
import gc
import re

import pytest
import torch

import torch_ort_backend
from torch_ort_backend import compile_stats
from torch_ort_backend.compiled_graph import live_graphs
from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2
from ortmodule_helpers import fresh_state

# Activations dominate (4 x 128 tokens, MLP width 256): the backward's peak is in a recomputed
# layer's MLP backward, not at the loss head.
MODEL = functools.partial(make_gpt2, vocab=128, hidden=64, layers=3, heads=2, positions=128, dropout=0.1)
BATCH = functools.partial(causal_lm_batch, batch=4, seq=128, vocab=128)


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    yield from fresh_state(monkeypatch)


def _train(model, env_value: str | None, monkeypatch, steps: int = 2):
    """Losses, gradients, the backward's engine peak and the backward sessions'
    ElementwiseRematerialization lines of `steps` SGD steps with every layer recomputed, with
    TOB_ELEMENTWISE_REMAT set to env_value (read when the sessions are created)."""
    if env_value is None:
        monkeypatch.delenv("TOB_ELEMENTWISE_REMAT", raising=False)
    else:
        monkeypatch.setenv("TOB_ELEMENTWISE_REMAT", env_value)
    torch._dynamo.reset()
    gc.collect()
    compile_stats().reset()
    model = copy.deepcopy(model).train()
    compiled = torch.compile(model, backend="ort",
                             options={"memory_opt_level": 1, "memory_opt_config": ["TransformerLayer:1:-1"]})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(1234)
    losses, grads = [], []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = compiled(**BATCH(step))["loss"]
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
        opt.step()
    stats = compile_stats()
    assert stats.runs >= 2 * steps and stats.fallbacks == 0, f"the engine did not run every graph: {stats}"
    lines = [line for g in live_graphs() if getattr(g, "stage", None) == "backward"
             for line in g.session.applied_passes() if line.startswith("ElementwiseRematerialization")]
    return losses, grads, torch_ort_backend.memory_stats()["backward_peak_bytes"], lines


def test_recomputed_gelu_gradient_reads_x_alone(monkeypatch):
    model = MODEL()
    off_losses, off_grads, off_peak, off_lines = _train(model, "0", monkeypatch)
    losses, grads, peak, lines = _train(model, None, monkeypatch)
    assert off_lines == []
    # Each of the three recomputed layers' GELU gradients recomputes the GELU's pieces.
    rewrites = sum(int(m.group(1)) for m in (re.search(r"(\d+) FusedElementwise nodes recompute", x) for x in lines)
                   if m)
    assert rewrites >= 3, lines
    # Four [4 x 128, 256] float32 tensors (512 KiB each) no longer held, one (x) held longer: the
    # backward's peak falls by at least one of them.
    assert peak <= off_peak - 512 * 1024, (peak, off_peak)
    for step, (a, b) in enumerate(zip(off_losses, losses)):
        assert torch.equal(a, b), f"loss of step {step} differs: {a.item()} vs {b.item()}"
    for step, (ga, gb) in enumerate(zip(off_grads, grads)):
        assert ga.keys() == gb.keys()
        for param in ga:
            assert torch.equal(ga[param], gb[param]), (
                f"gradient of {param} at step {step} differs by {(ga[param] - gb[param]).abs().max().item()}")
