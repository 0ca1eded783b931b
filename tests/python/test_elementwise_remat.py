"""The engine's ElementwiseRematerialization in compiled training (docs/architecture.md, "Elementwise
rematerialization"; docs/memory_optimizer.md, "A recomputed layer's GELU gradient from x alone"): with
every GPT-2 layer recomputed (plan TransformerLayer:1:-1) the GELU gradient's fused node recomputes
the GELU's pieces from its input instead of reading four tensors the recompute wrote for it, so the
backward's engine peak falls, and training gives the same losses and gradients as with the pass off
(TOB_ELEMENTWISE_REMAT=0), bit for bit (small GPT-2, dropout on, two SGD steps)."""

from __future__ import annotations

import functools
import re

import pytest

from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2
from memory_optimizer_harness import assert_identical, set_switch, train
from ortmodule_helpers import fresh_state

# Activations dominate (4 x 128 tokens, MLP width 256): the backward's peak is in a recomputed
# layer's MLP backward, not at the loss head.
MODEL = functools.partial(make_gpt2, vocab=128, hidden=64, layers=3, heads=2, positions=128, dropout=0.1)
BATCH = functools.partial(causal_lm_batch, batch=4, seq=128, vocab=128)
# Every layer recomputed.
OPTIONS = {"memory_opt_level": 1, "memory_opt_config": ["TransformerLayer:1:-1"]}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    yield from fresh_state(monkeypatch)


def _train(model, env_value: str | None, monkeypatch):
    """Two SGD steps with every layer recomputed and TOB_ELEMENTWISE_REMAT set to env_value: the run
    and the backward sessions' ElementwiseRematerialization lines."""
    set_switch(monkeypatch, "TOB_ELEMENTWISE_REMAT", env_value)
    run = train(model, BATCH, OPTIONS, pass_prefix="ElementwiseRematerialization")
    return run, run.pass_lines


def test_recomputed_gelu_gradient_reads_x_alone(monkeypatch):
    model = MODEL()
    off, off_lines = _train(model, "0", monkeypatch)
    run, lines = _train(model, None, monkeypatch)
    assert off_lines == []
    # Each of the three recomputed layers' GELU gradients recomputes the GELU's pieces.
    rewrites = sum(int(m.group(1)) for m in (re.search(r"(\d+) FusedElementwise nodes recompute", x) for x in lines)
                   if m)
    assert rewrites >= 3, lines
    # Four [4 x 128, 256] float32 tensors (512 KiB each) no longer held, one (x) held longer: the
    # backward's peak falls by at least one of them.
    peak, off_peak = run.memory["backward_peak_bytes"], off.memory["backward_peak_bytes"]
    assert peak <= off_peak - 512 * 1024, (peak, off_peak)
    assert_identical(off, run, "TOB_ELEMENTWISE_REMAT on against off")
