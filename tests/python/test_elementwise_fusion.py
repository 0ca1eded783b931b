"""The engine's ElementwiseFusion pass (docs/architecture.md, "Elementwise fusion") through
torch.compile(backend="ort") (on by default; the tests set TOB_ELEMENTWISE_FUSION=1 so that a
developer's =0 does not silently skip them): LLaMA (RMSNorm, rotary
embeddings, SwiGLU) and GPT-2 (tanh GELU, residual adds) train with outputs, every gradient and the
updated parameters equal to eager's, and each test asserts that the engine ran the graphs with
FusedElementwise nodes in both the forward and the backward session. A small module with every
fused op and broadcast kind checks forward and gradients against eager too."""

from __future__ import annotations

import functools
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_ort_backend as tob
from torch_ort_backend.compile_state import COMPILE_STATE, live_graphs
from torch_ort_backend.testing import models as cm
from compile_harness import check_training_matches_eager
from ortmodule_helpers import assert_engine_ran

_FUSED = re.compile(r"ElementwiseFusion: fused (\d+) elementwise nodes into (\d+) FusedElementwise nodes")


@pytest.fixture(autouse=True)
def fusion_on(monkeypatch):
    """The pass is on by default (TOB_ELEMENTWISE_FUSION=0 turns it off, read when a session is
    created); the tests set it on and drop sessions an earlier test may have created for an
    identical export with it off."""
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    monkeypatch.setenv("TOB_ELEMENTWISE_FUSION", "1")
    COMPILE_STATE.clear_sessions()
    yield
    COMPILE_STATE.clear_sessions()


def fresh() -> int:
    """Resets dynamo and the counters; returns the serial the next compiled graph will exceed."""
    torch._dynamo.reset()
    tob.compile_stats().reset()
    return max((g.serial for g in live_graphs()), default=0)


def fused_per_graph(since: int) -> dict[str, int]:
    """{graph name: FusedElementwise nodes its session made} for the graphs compiled after `since`."""
    found = {}
    for g in live_graphs():
        if g.serial <= since or g.session is None:
            continue
        counts = [int(m.group(2)) for line in g.session.applied_passes() if (m := _FUSED.search(line))]
        found[g.name] = sum(counts)
    return found


def assert_fused_forward_and_backward(since: int) -> None:
    assert_engine_ran(2)
    fused = fused_per_graph(since)
    assert any(name.startswith("forward") for name in fused), fused
    assert any(name.startswith("backward") for name in fused), fused
    assert all(n > 0 for n in fused.values()), f"a graph ran without FusedElementwise nodes: {fused}"


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_llama_training(attn):
    since = fresh()
    check_training_matches_eager(functools.partial(cm.make_llama, attn), cm.causal_lm_batch, fullgraph=True)
    assert_fused_forward_and_backward(since)


def test_gpt2_training():
    since = fresh()
    check_training_matches_eager(cm.make_gpt2, cm.causal_lm_batch, fullgraph=True)
    assert_fused_forward_and_backward(since)


class EveryFusedOp(nn.Module):
    """RMSNorm, SiLU gate, tanh and exact GELU, a bias, a residual and a masked select, over
    [batch, seq, hidden] activations with per-channel, per-row and scalar operands."""

    def __init__(self, hidden: int = 24) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, hidden))
        self.b = nn.Parameter(torch.linspace(-0.3, 0.4, hidden))
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        h = x * rstd * self.w
        g = F.silu(h) * (h + self.b)
        t = F.gelu(g, approximate="tanh") + F.gelu(self.proj(g)) - torch.sigmoid(h) / 3.0
        y = torch.where(mask, t, torch.exp(-h.abs())) + x
        return y.sum() + (y * y).mean()


def test_every_fused_op_forward_and_gradients():
    since = fresh()
    gen = torch.Generator().manual_seed(7)

    def batch(step: int):
        x = torch.randn(3, 5, 24, generator=gen) + 0.1
        mask = torch.rand(3, 5, 1, generator=gen) > 0.4
        return (x, mask)

    check_training_matches_eager(EveryFusedOp, batch, fullgraph=True)
    assert_fused_forward_and_backward(since)
