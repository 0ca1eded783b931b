"""The engine's RmsNormFusion and RotaryEmbeddingFusion passes (csrc/optimizer/rms_norm_fusion.cc,
rotary_embedding_fusion.cc) on real exported graphs: HuggingFace LLaMA, Qwen2 and Mistral from small
configs compiled with the "ort" backend, inference and training, against eager (outputs, gradients,
updated parameters), with the fused RMSNormalization and RotaryEmbedding nodes asserted in the
engine's optimised graphs; a hand-written RMSNorm (float32 and a bfloat16 model) against a float64
numpy reference; and the switches that turn the passes off."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

import torch_ort_backend as tob
from torch_ort_backend.compile_state import COMPILE_STATE, live_graphs
from torch_ort_backend.testing import models as cm
from compile_harness import check_training_matches_eager


@pytest.fixture(autouse=True)
def no_silent_fallback(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    monkeypatch.delenv("TOB_RMS_NORM_FUSION", raising=False)
    monkeypatch.delenv("TOB_ROTARY_FUSION", raising=False)
    COMPILE_STATE.clear_sessions()  # the variable is read when a session is created


def fresh() -> int:
    torch._dynamo.reset()
    tob.compile_stats().reset()
    return max((g.serial for g in live_graphs()), default=0)


def optimised_nodes(since: int) -> dict[str, list[dict]]:
    """name of each engine graph compiled since `since` -> the nodes of its optimised graph."""
    return {g.name: g.session._session.optimized_graph()["nodes"] for g in live_graphs()
            if g.serial > since and g.session is not None}


def count(nodes: list[dict], op: str) -> int:
    return sum(n["op_type"] == op for n in nodes)


def make_qwen2(vocab: int = 128, hidden: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2) -> nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                        num_hidden_layers=layers, num_attention_heads=heads,
                                        num_key_value_heads=kv_heads, max_position_embeddings=64,
                                        attn_implementation="eager"))


def make_mistral(vocab: int = 128, hidden: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2) -> nn.Module:
    from transformers import MistralConfig, MistralForCausalLM
    torch.manual_seed(0)
    return MistralForCausalLM(MistralConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                            num_hidden_layers=layers, num_attention_heads=heads,
                                            num_key_value_heads=kv_heads, max_position_embeddings=64,
                                            sliding_window=None, attn_implementation="eager"))


MODELS = {"llama": cm.make_llama, "qwen2": make_qwen2, "mistral": make_mistral}
NORMS = 5  # two per decoder layer (2 layers) and the final norm
ROTATIONS = 4  # queries and keys of each of the 2 layers


@pytest.mark.parametrize("model", sorted(MODELS))
def test_inference_runs_every_rmsnorm_fused(model):
    since = fresh()
    torch.manual_seed(0)
    eager = MODELS[model]().eval()
    compiled = torch.compile(eager, backend="ort", fullgraph=True)
    batch = cm.causal_lm_batch(0)
    with torch.no_grad():
        want = eager(**batch).logits
        got = compiled(**batch).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    graphs = optimised_nodes(since)
    assert len(graphs) == 1, list(graphs)
    nodes = next(iter(graphs.values()))
    assert count(nodes, "RMSNormalization") == NORMS, sorted({n["op_type"] for n in nodes})
    assert count(nodes, "ReduceMean") == 0  # nothing of the decomposed chains is left
    assert count(nodes, "RotaryEmbedding") == ROTATIONS
    assert count(nodes, "Neg") == 0
    assert all(n["provider"] == "CPUExecutionProvider" for n in nodes
               if n["op_type"] in ("RMSNormalization", "RotaryEmbedding"))


@pytest.mark.parametrize("model", ["llama", "qwen2"])
def test_training_forward_fuses_and_returns_the_saved_inverse(model):
    """AOTAutograd saves each RMSNorm's rsqrt for the backward: the fused ai.tob node returns it as
    its second output; three SGD steps match eager (outputs, every gradient, the parameters)."""
    since = fresh()
    check_training_matches_eager(MODELS[model], cm.causal_lm_batch, backend="ort", steps=3, fullgraph=True)
    graphs = optimised_nodes(since)
    forward = [nodes for name, nodes in graphs.items() if name.startswith("forward")]
    assert len(forward) == 1, list(graphs)
    fused = [n for n in forward[0] if n["op_type"] == "RMSNormalization"]
    assert len(fused) == NORMS, sorted({n["op_type"] for n in forward[0]})
    assert all(n["domain"] == "ai.tob" and len(n["outputs"]) == 2 for n in fused), fused
    assert count(forward[0], "ReduceMean") == 0
    assert count(forward[0], "RotaryEmbedding") == ROTATIONS


class HandWrittenRMSNorm(nn.Module):
    """LlamaRMSNorm's code: widen to float32, normalise, narrow back, scale."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def numpy_rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w.astype(np.float64)


def randn(*shape: int, seed: int) -> torch.Tensor:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x + 0.1 * torch.sign(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hand_written_rmsnorm_matches_float64(dtype):
    since = fresh()
    module = HandWrittenRMSNorm(48, 1e-6).to(dtype)
    x = randn(3, 5, 48, seed=1).to(dtype)
    with torch.no_grad():
        got = torch.compile(module, backend="ort")(x)
    assert got.dtype == dtype
    want = numpy_rms_norm(x.float().numpy(), module.weight.detach().float().numpy(), 1e-6)
    # float32: a few float32 roundings; bfloat16: the chain (and the fused kernel, which repeats it)
    # rounds the normalised value and then the product with the weight to bfloat16 (unit roundoff
    # 2^-8 each).
    tol = 2e-6 if dtype == torch.float32 else 2 * 2.0 ** -8
    np.testing.assert_allclose(got.double().numpy(), want, rtol=tol, atol=1e-6)
    nodes = next(iter(optimised_nodes(since).values()))
    assert count(nodes, "RMSNormalization") == 1, sorted({n["op_type"] for n in nodes})


def test_hand_written_rmsnorm_gradients_match_float64():
    since = fresh()
    module = HandWrittenRMSNorm(48, 1e-5)
    reference = HandWrittenRMSNorm(48, 1e-5).double()
    x = randn(4, 48, seed=2).float().requires_grad_()
    xr = x.detach().double().requires_grad_()
    dy = randn(4, 48, seed=3)
    torch.compile(module, backend="ort")(x).backward(dy.float())
    reference(xr).backward(dy)
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(module.weight.grad.double(), reference.weight.grad, rtol=1e-5, atol=1e-6)
    forward = [nodes for name, nodes in optimised_nodes(since).items() if name.startswith("forward")]
    assert count(forward[0], "RMSNormalization") == 1


@pytest.mark.parametrize("switch", ["TOB_RMS_NORM_FUSION", "TOB_ROTARY_FUSION"])
def test_the_switches_turn_the_fusions_off(switch, monkeypatch):
    monkeypatch.setenv(switch, "0")
    since = fresh()
    eager = cm.make_llama().eval()
    batch = cm.causal_lm_batch(0)
    with torch.no_grad():
        want = eager(**batch).logits
        got = torch.compile(eager, backend="ort")(**batch).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    nodes = next(iter(optimised_nodes(since).values()))
    rms, rope = switch == "TOB_RMS_NORM_FUSION", switch == "TOB_ROTARY_FUSION"
    assert count(nodes, "RMSNormalization") == (0 if rms else NORMS)
    assert count(nodes, "ReduceMean") == (NORMS if rms else 0)
    assert count(nodes, "RotaryEmbedding") == (0 if rope else ROTATIONS)


def test_mistral_and_qwen2_configs_build():
    """The helper configs above are real decoder models (guards against a transformers change that
    would make the parametrised tests compare nothing)."""
    for make in (make_qwen2, make_mistral):
        model = make()
        assert sum(type(m).__name__.endswith("RMSNorm") for m in model.modules()) == NORMS


def test_fused_training_equals_the_unfused_engine_bit_for_bit(monkeypatch):
    """The fused kernels repeat the chains' arithmetic, so LLaMA's loss and every gradient with both
    fusions are the unfused engine's exactly (what lets the memory optimizer recompute a saved rsqrt
    from the decomposed chain in the backward)."""
    batch = cm.causal_lm_batch(0)
    results = {}
    for fused in (True, False):
        for switch in ("TOB_RMS_NORM_FUSION", "TOB_ROTARY_FUSION"):
            monkeypatch.setenv(switch, "1" if fused else "0")
        COMPILE_STATE.clear_sessions()
        since = fresh()
        model = cm.make_llama()
        out = torch.compile(model, backend="ort")(**batch)
        out.loss.backward()
        results[fused] = (out.loss.detach(), {n: p.grad for n, p in model.named_parameters()})
        forward = [nodes for name, nodes in optimised_nodes(since).items() if name.startswith("forward")][0]
        assert count(forward, "RMSNormalization") == (NORMS if fused else 0)
        assert count(forward, "RotaryEmbedding") == (ROTATIONS if fused else 0)
    (loss_on, grads_on), (loss_off, grads_off) = results[True], results[False]
    assert torch.equal(loss_on, loss_off), (loss_on.item(), loss_off.item())
    assert grads_on.keys() == grads_off.keys()
    for name, grad in grads_on.items():
        assert torch.equal(grad, grads_off[name]), name
