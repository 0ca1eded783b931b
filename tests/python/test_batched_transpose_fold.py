"""MatMulTransposeFusion's batched fold in compiled training (docs/architecture.md, "Batched products
read transposed operands in place"): at memory_opt_level 1 the recomputed layers' attention backward
reads its transposed operands in place (com.microsoft FusedMatMul), and training gives the same
losses and gradients as with the fold off (TOB_BATCHED_MATMUL_TRANSPOSE=0, the Transposes copied),
bit for bit, on GPT-2 and LLaMA (small configs, dropout on)."""

from __future__ import annotations

import copy
import functools
import gc
import re

import pytest
import torch

from torch_ort_backend import compile_stats
from torch_ort_backend.compiled_graph import live_graphs
from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2, make_llama
from ortmodule_helpers import fresh_state

MODELS = {
    "gpt2": functools.partial(make_gpt2, layers=3, dropout=0.1),
    "llama": functools.partial(make_llama, layers=3, dropout=0.1),
}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    yield from fresh_state(monkeypatch)


def _train(model, env_value: str | None, monkeypatch, steps: int = 2):
    """Losses, gradients and the backward sessions' MatMulTransposeFusion lines of `steps` SGD steps
    at memory_opt_level 1 on a copy of `model`, with TOB_BATCHED_MATMUL_TRANSPOSE set to env_value
    (read when the sessions are created)."""
    if env_value is None:
        monkeypatch.delenv("TOB_BATCHED_MATMUL_TRANSPOSE", raising=False)
    else:
        monkeypatch.setenv("TOB_BATCHED_MATMUL_TRANSPOSE", env_value)
    torch._dynamo.reset()
    gc.collect()
    compile_stats().reset()
    model = copy.deepcopy(model).train()
    compiled = torch.compile(model, backend="ort", options={"memory_opt_level": 1})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(1234)
    losses, grads = [], []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = compiled(**causal_lm_batch(step))["loss"]
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
        opt.step()
    stats = compile_stats()
    assert stats.runs >= 2 * steps and stats.fallbacks == 0, f"the engine did not run every graph: {stats}"
    lines = [line for g in live_graphs() if getattr(g, "stage", None) == "backward"
             for line in g.session.applied_passes() if line.startswith("MatMulTransposeFusion")]
    return losses, grads, lines


@pytest.mark.parametrize("name", sorted(MODELS))
def test_level_1_backward_reads_transposed_operands_in_place(name, monkeypatch):
    model = MODELS[name]()
    copied_losses, copied_grads, copied_lines = _train(model, "0", monkeypatch)
    losses, grads, lines = _train(model, None, monkeypatch)
    # The two recomputed layers' attention backwards read P, Q, K and V transposed: 8 more operand
    # Transposes folded than with the switch off (where only the 2-D Gemm folds happen).
    def operands(pass_lines):
        return sum(int(m.group(1)) for m in (re.search(r"folded (\d+) operand", line) for line in pass_lines) if m)

    assert operands(lines) - operands(copied_lines) >= 8, (lines, copied_lines)
    for step, (a, b) in enumerate(zip(copied_losses, losses)):
        assert torch.equal(a, b), f"{name}: loss of step {step} differs: {a.item()} vs {b.item()}"
    for step, (ga, gb) in enumerate(zip(copied_grads, grads)):
        assert ga.keys() == gb.keys()
        for param in ga:
            assert torch.equal(ga[param], gb[param]), (
                f"{name}: gradient of {param} at step {step} differs by {(ga[param] - gb[param]).abs().max().item()}")
