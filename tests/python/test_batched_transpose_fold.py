"""MatMulTransposeFusion's batched fold in compiled training (docs/architecture.md, "Batched products
read transposed operands in place"): at memory_opt_level 1 the recomputed layers' attention backward
reads its transposed operands in place (com.microsoft FusedMatMul), and training gives the same
losses and gradients as with the fold off (TOB_BATCHED_MATMUL_TRANSPOSE=0, the Transposes copied),
bit for bit, on GPT-2 and LLaMA (small configs, dropout on)."""

from __future__ import annotations

import functools
import re

import pytest

from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2, make_llama
from memory_optimizer_harness import assert_identical, set_switch, train
from ortmodule_helpers import fresh_state

MODELS = {
    "gpt2": functools.partial(make_gpt2, layers=3, dropout=0.1),
    "llama": functools.partial(make_llama, layers=3, dropout=0.1),
}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    yield from fresh_state(monkeypatch)


def _train(model, env_value: str | None, monkeypatch):
    """Two SGD steps at memory_opt_level 1 with TOB_BATCHED_MATMUL_TRANSPOSE set to env_value: the
    run and the backward sessions' MatMulTransposeFusion lines."""
    set_switch(monkeypatch, "TOB_BATCHED_MATMUL_TRANSPOSE", env_value)
    run = train(model, causal_lm_batch, {"memory_opt_level": 1}, pass_prefix="MatMulTransposeFusion")
    return run, run.pass_lines


@pytest.mark.parametrize("name", sorted(MODELS))
def test_level_1_backward_reads_transposed_operands_in_place(name, monkeypatch):
    model = MODELS[name]()
    copied, copied_lines = _train(model, "0", monkeypatch)
    run, lines = _train(model, None, monkeypatch)
    # The two recomputed layers' attention backwards read P, Q, K and V transposed: 8 more operand
    # Transposes folded than with the switch off (where only the 2-D Gemm folds happen).
    def operands(pass_lines):
        return sum(int(m.group(1)) for m in (re.search(r"folded (\d+) operand", line) for line in pass_lines) if m)

    assert operands(lines) - operands(copied_lines) >= 8, (lines, copied_lines)
    assert_identical(copied, run, f"{name}: TOB_BATCHED_MATMUL_TRANSPOSE on against off")
