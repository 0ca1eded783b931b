"""F.scaled_dot_product_attention through torch.compile(backend="ort"): AOTAutograd hands the exporter
torch's fused CPU op and its backward (_scaled_dot_product_flash_attention_for_cpu[_backward]), which
become the engine's FlashAttention / FlashAttentionGrad. Forward and gradients against eager on
random non-zero inputs (causal with equal and unequal lengths, boolean and additive masks of several
broadcasts, GQA, an explicit scale) and on HuggingFace GPT-2 and LLaMA (SDPA attention, padded
batches), float16 / bfloat16 (float32 inside); each test asserts the engine ran the native ops and no
ATen attention node. Dropout keeps torch's kernels (its random stream is torch's)."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

import torch_ort_backend as tob
from torch_ort_backend.compile_state import live_graphs
from torch_ort_backend.testing import models as cm
from compile_harness import check_training_matches_eager
from ortmodule_helpers import assert_engine_ran


@pytest.fixture(autouse=True)
def no_silent_fallback(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")


def fresh() -> int:
    """Resets dynamo and the counters; returns the serial the next compiled graph will exceed."""
    torch._dynamo.reset()
    tob.compile_stats().reset()
    return max((g.serial for g in live_graphs()), default=0)


def engine_op_types(since: int) -> set[str]:
    return {n.op_type for g in live_graphs() if g.serial > since and g.exported is not None
            for n in g.exported.model.graph.node}


def aten_attention_ops() -> list[str]:
    return [op for op in tob.compile_stats().aten_fallback_ops if "scaled_dot_product" in op]


def assert_native_attention_ran(since: int, backward: bool = True) -> None:
    assert_engine_ran(2 if backward else 1)
    ops = engine_op_types(since)
    assert "FlashAttention" in ops, sorted(ops)
    assert ("FlashAttentionGrad" in ops) == backward, sorted(ops)
    assert not aten_attention_ops(), aten_attention_ops()


def randn(*shape: int, seed: int) -> torch.Tensor:
    """Normal values pushed away from zero (|x| >= 0.1)."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return x + 0.1 * torch.sign(x)


CASES = {
    # name: (q shape, k/v shape, v head size, sdpa kwargs, mask shape or None, mask kind)
    "causal": ((2, 4, 37, 16), (2, 4, 37, 16), 16, dict(is_causal=True), None, None),
    "causal_fewer_queries": ((2, 4, 20, 16), (2, 4, 70, 16), 16, dict(is_causal=True), None, None),
    "causal_more_queries": ((1, 2, 140, 8), (1, 2, 66, 8), 8, dict(is_causal=True), None, None),
    "bool_padding_mask": ((2, 4, 33, 16), (2, 4, 33, 16), 16, {}, (2, 1, 1, 33), "bool"),
    "bool_full_mask": ((2, 4, 33, 16), (2, 4, 33, 16), 16, {}, (2, 1, 33, 33), "bool"),
    "additive_mask_per_head": ((2, 3, 21, 8), (2, 3, 45, 8), 8, dict(scale=0.4), (1, 3, 21, 45), "float"),
    "gqa_causal": ((2, 6, 29, 16), (2, 2, 29, 16), 16, dict(is_causal=True, enable_gqa=True), None, None),
    "gqa_masked": ((1, 4, 19, 8), (1, 1, 50, 8), 8, dict(enable_gqa=True), (1, 1, 19, 50), "float"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sdpa_runs_native_fused_attention(name):
    q_shape, kv_shape, v_head, kwargs, mask_shape, mask_kind = CASES[name]
    q = randn(*q_shape, seed=1).requires_grad_()
    k = randn(*kv_shape, seed=2).requires_grad_()
    v = randn(*kv_shape[:3], v_head, seed=3).requires_grad_()
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(4)) < 0.75
        mask[..., 0] = True  # every query sees a key: torch's math reference gives NaN rows otherwise
    elif mask_kind == "float":
        mask = randn(*mask_shape, seed=4)

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)

    since = fresh()
    compiled = torch.compile(attention, backend="ort", fullgraph=True)
    out = compiled(q, k, v)
    dy = randn(*out.shape, seed=5)
    grads = torch.autograd.grad(out, (q, k, v), dy)
    # The reference: eager attention in float64 on the same values.
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_mask = mask.double() if mask is not None and mask.is_floating_point() else mask
    ref = F.scaled_dot_product_attention(*ref_in, attn_mask=ref_mask, **kwargs)
    ref_grads = torch.autograd.grad(ref, ref_in, dy.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    for what, got, want in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5, msg=lambda m, w=what: f"d{w}: {m}")
    assert_native_attention_ran(since)


def test_sdpa_inference_runs_the_forward_only():
    q, k, v = (randn(2, 4, 23, 8, seed=s) for s in (1, 2, 3))
    since = fresh()
    with torch.no_grad():
        out = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                            backend="ort")(q, k, v)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    assert_native_attention_ran(since, backward=False)


def test_dropout_keeps_torchs_kernels():
    """Dropout inside attention draws from torch's generator: the graph holds no FlashAttention."""
    q, k, v = (randn(1, 2, 16, 8, seed=s).requires_grad_() for s in (1, 2, 3))
    since = fresh()
    out = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.3),
                        backend="ort")(q, k, v)
    out.sum().backward()
    assert_engine_ran(2)
    assert "FlashAttention" not in engine_op_types(since)


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
def test_16bit_attention_runs_native_in_float32(dtype, tol):
    """16-bit attention: the engine widens to float32 once and rounds each result once, so output
    and gradients are within a few of the type's roundoff of float64 attention on the same values
    (torch's own 16-bit kernel is held to the same bound)."""
    q, k, v = (randn(2, 4, 45, 16, seed=s).to(dtype).requires_grad_() for s in (1, 2, 3))
    mask = randn(2, 1, 45, 45, seed=4).to(dtype)
    since = fresh()
    fn = functools.partial(F.scaled_dot_product_attention, attn_mask=mask)
    out = torch.compile(fn, backend="ort")(q, k, v)
    dy = randn(*out.shape, seed=5).to(dtype)
    grads = torch.autograd.grad(out, (q, k, v), dy)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, attn_mask=mask.double())
    ref_grads = torch.autograd.grad(ref, ref_in, dy.double())
    eager_in = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    eager = fn(*eager_in)
    eager_grads = torch.autograd.grad(eager, eager_in, dy)
    for got, want, torchs in zip((out, *grads), (ref, *ref_grads), (eager, *eager_grads)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
        torch.testing.assert_close(torchs.double(), want, rtol=tol, atol=tol)
    assert_native_attention_ran(since)


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_hf_models_with_sdpa_train_on_native_attention(model):
    """GPT-2 (causal + padding mask) and LLaMA (GQA: 4 query heads on 2 key/value heads) with
    attn_implementation="sdpa": 3 SGD steps beside eager, every attention on the engine's kernel."""
    make = cm.make_gpt2 if model == "gpt2" else cm.make_llama
    since = fresh()
    check_training_matches_eager(functools.partial(make, "sdpa"), cm.causal_lm_batch, backend="ort", steps=3,
                                 fullgraph=True)
    ops = engine_op_types(since)
    assert {"FlashAttention", "FlashAttentionGrad"} <= ops, sorted(ops)
    assert not aten_attention_ops(), aten_attention_ops()
