"""onnxruntime-training's remaining ORTMODULE_* variables (issue 19): each takes effect with the
guidelines' meaning or is refused with the reason; and the runtime inspector
(ORTMODULE_PRINT_INPUT_DENSITY, ORTMODULE_PRINT_MEMORY_STATS), checked on what it prints."""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_ort_backend.testing.models import causal_lm_batch, make_bert_mlm, make_gpt2
from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend import ORTModule, compile_stats
from torch_ort_backend.compile_state import live_graphs
from torch_ort_backend.options import REFUSED, SPEC, resolve


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    yield from fresh_state(monkeypatch)


# --- refused variables ---------------------------------------------------------------------------

@pytest.mark.parametrize("option", sorted(REFUSED))
def test_a_switch_this_engine_cannot_honour_is_refused_with_the_reason(option, monkeypatch):
    """Asking for the feature is a ValueError naming the variable and why it does not apply, both as a
    variable and as an option; the value that asks for nothing is accepted."""
    env, _ = SPEC[option]
    asked = {"max_tuning_duration_ms": "500", "tuning_results_path": "/tmp/tuning"}.get(option, "1")
    with pytest.raises(ValueError, match=rf"{env}='{re.escape(asked)}' cannot be honoured: \w+"):
        resolve(None, environ={env: asked})
    monkeypatch.setenv(env, asked)
    with pytest.raises(ValueError, match=rf"{env}.*cannot be honoured"):
        ORTModule(nn.Linear(3, 3))
    monkeypatch.delenv(env)
    with pytest.raises(ValueError, match=rf"option '{option}'.*cannot be honoured"):
        resolve({option: asked if option == "tuning_results_path" else int(asked)}, environ={})
    off = {"max_tuning_duration_ms": "0", "tuning_results_path": ""}.get(option, "0")
    resolve(None, environ={env: off})


def test_refusals_reach_torch_compile():
    """Under torch.compile the refusal fails the compile (as any invalid option does)."""
    model = torch.compile(nn.Linear(3, 3), backend="ort", options={"enable_tuning": True})
    with pytest.raises(Exception, match="enable_tuning.*cannot be honoured"):
        model(torch.randn(2, 3))


# --- ORTMODULE_DEEPCOPY_BEFORE_MODEL_EXPORT ---------------------------------------------------------

class CountingModule(nn.Module):
    """A forward that mutates module state: a deep copy before export existed so that an export
    running the forward could not change it. Here the export never runs it on real tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.calls.add_(1)
        return self.linear(x).tanh()


@pytest.mark.parametrize("value", ["1", "0"])
def test_deepcopy_before_export_either_way_leaves_module_state_as_eager(value, monkeypatch):
    """Both meanings hold with either value: the exported graph never ran the module's forward
    (the buffer counts exactly the user's calls, as in eager), and no copy of the module is made."""
    monkeypatch.setenv("ORTMODULE_DEEPCOPY_BEFORE_MODEL_EXPORT", value)
    eager = CountingModule()
    model = ORTModule(copy.deepcopy(eager))
    x = torch.randn(3, 4, requires_grad=True)
    for _ in range(3):
        model(x).sum().backward()
        eager(x).sum().backward()
    assert int(model.module.calls) == int(eager.calls) == 3
    torch.testing.assert_close(model.module.linear.weight.grad, eager.linear.weight.grad)
    assert_engine_ran(3)


# --- ORTMODULE_ATEN_SDPA_FALLBACK ----------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(dim=1)


@pytest.mark.parametrize("fallback", [True, False])
def test_aten_sdpa_fallback_decides_whether_attention_is_one_torch_kernel(fallback, monkeypatch):
    """1 (default here): attention forward and backward stay fused, as the engine's FlashAttention /
    FlashAttentionGrad (float32; torch's fused kernel as ATen nodes where those do not apply).
    0: attention is exported as matmul/softmax/matmul (no fused attention op in either graph).
    Output and gradients equal eager either way."""
    monkeypatch.setenv("ORTMODULE_ATEN_SDPA_FALLBACK", "1" if fallback else "0")
    since = max((g.serial for g in live_graphs()), default=0)
    torch.manual_seed(0)
    eager = Attention()
    model = ORTModule(copy.deepcopy(eager))
    x = torch.randn(2, 5, 8, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    out, ref = model(x), eager(x2)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    out.pow(2).sum().backward()
    ref.pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.module.qkv.weight.grad, eager.qkv.weight.grad, rtol=1e-5, atol=1e-6)
    aten_fused = [op for op in compile_stats().aten_fallback_ops if "scaled_dot_product" in op]
    assert not aten_fused, aten_fused
    native = {n.op_type for g in live_graphs() if g.serial > since and g.exported is not None
              for n in g.exported.model.graph.node} & {"FlashAttention", "FlashAttentionGrad"}
    assert native == ({"FlashAttention", "FlashAttentionGrad"} if fallback else set()), native
    assert_engine_ran(2)


# --- runtime inspector ---------------------------------------------------------------------------

def _density_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("[input density]")]


def test_input_density_of_gpt2_labels_each_step(monkeypatch, capsys):
    """GPT-2 (HuggingFace's causal-LM loss pads and shifts the labels): one line per step names the
    labels input and prints its share of labels != -100, computed here from the batch itself."""
    monkeypatch.setenv("ORTMODULE_PRINT_INPUT_DENSITY", "1")
    model = ORTModule(make_gpt2())
    for step in range(2):
        batch = causal_lm_batch(step, batch=2, seq=16)
        model(**batch).loss.backward()
        labels = batch["labels"]
        valid = int((labels != -100).sum())
        lines = _density_lines(capsys.readouterr().out)
        assert len(lines) == 1, lines
        assert re.search(rf"step {step + 1}: label input '\w+' \(ignore_index -100\): "
                         rf"{100.0 * valid / labels.numel():.1f}% dense \({valid}/{labels.numel()}\)", lines[0]), lines
        assert "embedding input" not in lines[0]  # GPT-2's wte has no padding_idx: nothing marks padding
    assert_engine_ran(4)


def test_input_density_of_bert_embedding_and_labels(monkeypatch, capsys):
    """BERT's word embeddings have padding_idx 0: the input ids' share of non-zero tokens is printed
    beside the MLM labels' density."""
    monkeypatch.setenv("ORTMODULE_PRINT_INPUT_DENSITY", "1")
    model = ORTModule(make_bert_mlm())
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(1, 128, (2, 16), generator=gen)
    ids[0, 10:] = 0
    ids[1, 4:] = 0
    labels = ids.masked_fill(torch.rand(2, 16, generator=gen) < 0.5, -100).masked_fill(ids == 0, -100)
    model(input_ids=ids, attention_mask=(ids != 0).long(), labels=labels).loss.backward()
    (line,) = _density_lines(capsys.readouterr().out)
    valid_labels, valid_ids = int((labels != -100).sum()), int((ids != 0).sum())
    assert "label input" in line and f"({valid_labels}/32)" in line, line
    assert re.search(rf"embedding input '\w+' \(padding_idx 0\): {100.0 * valid_ids / 32:.1f}% dense "
                     rf"\({valid_ids}/32\)", line), line
    assert_engine_ran(2)


def test_memory_stats_per_graph_and_phase(monkeypatch, capsys):
    """One line per engine run naming the graph and phase with the engine's own peak and arena
    bytes; the printed peak is the session's last_run_stats() of that run."""
    from torch_ort_backend.compiled_graph import live_graphs

    monkeypatch.setenv("ORTMODULE_PRINT_MEMORY_STATS", "1")
    model = ORTModule(nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 4)))
    x = torch.randn(8, 16)
    for _ in range(2):
        model(x).square().sum().backward()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[memory]")]
    assert len(lines) == 4, lines
    assert [re.match(r"\[memory\] \w+ \((\w+)\) step (\d)", line).groups() for line in lines] == [
        ("forward", "1"), ("backward", "1"), ("forward", "2"), ("backward", "2")]
    graphs = {g.stage: g for g in live_graphs() if g.session is not None}
    for line in lines[2:]:
        stage = re.match(r"\[memory\] \w+ \((\w+)\)", line).group(1)
        stats = graphs[stage].session.last_run_stats()
        assert f"peak {stats['peak_bytes']} bytes" in line and f"arena {stats['arena_bytes']} bytes" in line, line
    # The backward's intermediates (the GELU gradient, 8x64 floats at least) are not all outputs.
    assert graphs["backward"].session.last_run_stats()["peak_bytes"] >= 8 * 64 * 4
    assert_engine_ran(4)


def test_inspector_prints_nothing_by_default(capsys):
    model = ORTModule(make_gpt2())
    model(**causal_lm_batch(0)).loss.backward()
    out = capsys.readouterr().out
    assert "[input density]" not in out and "[memory]" not in out
    assert_engine_ran(2)
