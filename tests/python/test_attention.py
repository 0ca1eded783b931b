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


U_BF16 = 2.0 ** -8  # bfloat16's unit roundoff: a rounded value is within U_BF16 of itself


def bf16_attention_bounds(q, k, v, dy, y16, mask, causal, scale):
    """float64 attention on the given (bfloat16) values and elementwise error bounds of the bfloat16
    kernel there (the one for both torch's CPU flash attention and ours): P and dS rounded to
    bfloat16 as the products' operands (u of each term), each result stored in bfloat16 (u of
    itself), and delta = dY . Y read from the bfloat16 forward output y16 (|dY| . |y16 - Y| per
    row, through P into dS). 1e-4 of the absolute sums covers the float32 accumulation."""
    q, k, v, dy = (t.detach().double() for t in (q, k, v, dy))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = scale * q @ k.transpose(-1, -2)
    if mask is not None:
        s = s + (torch.where(mask, 0.0, -torch.inf) if mask.dtype == torch.bool else mask.double())
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -torch.inf)
    p = torch.softmax(s, -1)
    y = p @ v
    dp = dy @ v.transpose(-1, -2)
    ds = p * (dp - (dy * y).sum(-1, keepdim=True))
    dq, dk, dv = scale * ds @ k, scale * ds.transpose(-1, -2) @ q, p.transpose(-1, -2) @ dy
    u = U_BF16 + 1e-4
    ddelta = (dy.abs() * (y16.double() - y).abs()).sum(-1, keepdim=True)
    ds_err = u * ds.abs() + p * ddelta
    bounds = [u * p @ v.abs(), scale * ds_err @ k.abs(), scale * ds_err.transpose(-1, -2) @ q.abs(),
              u * p.transpose(-1, -2) @ dy.abs()]
    exact = [y, dq, dk, dv]
    for i in (1, 2, 3):  # the grouped heads' K / V gradients sum over their query heads
        if i > 1:
            exact[i] = exact[i].unflatten(1, (-1, group)).sum(2)
            bounds[i] = bounds[i].unflatten(1, (-1, group)).sum(2)
    return exact, [b + U_BF16 * e.abs() + 1e-7 for b, e in zip(bounds, exact)]


BF16_CASES = {
    # name: (q shape, k/v shape, sdpa kwargs, mask shape or None, mask kind)
    "causal": ((2, 4, 128, 32), (2, 4, 128, 32), dict(is_causal=True), None, None),
    "padding_mask": ((2, 4, 70, 32), (2, 4, 133, 32), {}, (2, 1, 1, 133), "bool"),
    "additive_mask": ((2, 2, 67, 16), (2, 2, 67, 16), dict(scale=0.3), (2, 1, 67, 67), "float"),
    "gqa_causal": ((2, 6, 29, 16), (2, 2, 29, 16), dict(is_causal=True, enable_gqa=True), None, None),
}


@pytest.mark.parametrize("name", sorted(BF16_CASES))
def test_autocast_bf16_attention_within_bfloat16_bounds(name):
    """SDPA under torch.autocast("cpu", torch.bfloat16) on float32 inputs, as a model's autocast
    step runs it: our output and gradients within the elementwise bounds of bf16_attention_bounds
    against float64 attention on the same bfloat16 values, and close to eager autocast's, which
    (where it runs torch's CPU flash kernel) meets the same bounds."""
    q_shape, kv_shape, kwargs, mask_shape, mask_kind = BF16_CASES[name]
    q, k, v = (randn(*shape, seed=s).requires_grad_() for s, shape in ((1, q_shape), (2, kv_shape), (3, kv_shape)))
    mask = None
    if mask_kind == "bool":
        mask = randn(*mask_shape, seed=4) > -0.8
    elif mask_kind == "float":
        mask = randn(*mask_shape, seed=4)
    fn = functools.partial(F.scaled_dot_product_attention, attn_mask=mask, **kwargs)
    dy = randn(*q_shape[:3], kv_shape[3], seed=5).to(torch.bfloat16)

    def run(f):
        ins = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        with torch.autocast("cpu", torch.bfloat16):
            out = f(*ins)
        return [out, *torch.autograd.grad(out, ins, dy)]

    since = fresh()
    ours = run(torch.compile(fn, backend="ort"))
    assert_native_attention_ran(since)
    eager = run(fn)
    scale = kwargs.get("scale", q_shape[-1] ** -0.5)
    q16, k16, v16 = (t.detach().to(torch.bfloat16) for t in (q, k, v))
    mask16 = mask.to(torch.bfloat16) if mask_kind == "float" else mask  # autocast's SDPA takes the mask in bf16
    for got, label in ((ours, "ort"), (eager, "eager")):
        if label == "eager" and name.startswith("gqa"):
            continue  # torch's CPU flash kernel has no GQA: eager takes the math path (bf16 scores, rounded)
        exact, bounds = bf16_attention_bounds(q16, k16, v16, dy, got[0], mask16, kwargs.get("is_causal", False),
                                              scale)
        for what, g, want, bound in zip(("Y", "dQ", "dK", "dV"), got, exact, bounds):
            err = (g.double() - want).abs()
            # Y in bfloat16; the gradients reach the float32 inputs through autocast's casts, widened
            assert g.dtype == (torch.bfloat16 if what == "Y" else torch.float32), (label, what, g.dtype)
            assert (err <= bound).all(), (label, what, (err / bound).max().item(), err.max().item())
    for g, e in zip(ours, eager):  # the two kernels' results: each within the bounds, so within their sum
        torch.testing.assert_close(g.double(), e.double(), rtol=2 * 2 * U_BF16, atol=2 * 2 * U_BF16)


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
