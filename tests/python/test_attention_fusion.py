"""Eager attention (matmul / softmax / matmul) fused into scaled_dot_product_attention on dynamo's
graph (torch_ort_backend/attention_fusion.py), then run as the engine's FlashAttention /
FlashAttentionGrad: forward and gradients against eager (and a float64 reference) on random non-zero
inputs, HuggingFace GPT-2, BERT and LLaMA with attn_implementation="eager", and every case the pass
must leave alone (dropout in training, attention probabilities returned, a mask that needs a gradient
or is not a float mask), each of which still matches eager."""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_ort_backend as tob
from torch_ort_backend.attention_fusion import STATS
from torch_ort_backend.compile_state import live_graphs
from torch_ort_backend.testing import models as cm
from compile_harness import check_training_matches_eager


@pytest.fixture(autouse=True)
def no_silent_fallback(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")


def fresh() -> int:
    torch._dynamo.reset()
    tob.compile_stats().reset()
    STATS.reset()
    return max((g.serial for g in live_graphs()), default=0)


def engine_op_types(since: int) -> set[str]:
    return {n.op_type for g in live_graphs() if g.serial > since and g.exported is not None
            for n in g.exported.model.graph.node}


def randn(*shape: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (x + 0.1 * torch.sign(x)).to(dtype)


class EagerAttention(nn.Module):
    """The chain as hand-written transformers spell it, with the spellings the pass accepts."""

    def __init__(self, scale_by: str = "mul", cast: bool = False, dropout: float = 0.0,
                 return_probs: bool = False) -> None:
        super().__init__()
        self.scale_by, self.cast, self.dropout, self.return_probs = scale_by, cast, dropout, return_probs

    def forward(self, q, k, v, mask=None):
        if self.scale_by == "mul":
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        elif self.scale_by == "div":
            scores = (q @ k.transpose(2, 3)) / math.sqrt(q.shape[-1])
        else:  # pre-scaled query (OPT): no scale on the scores
            scores = torch.matmul(q * 0.3, k.transpose(3, 2))
        if mask is not None:
            scores = scores + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32) if self.cast else scores.softmax(-1)
        if self.cast:
            probs = probs.to(v.dtype)
        probs = F.dropout(probs, p=self.dropout, training=self.training)
        out = torch.matmul(probs, v)
        return (out, probs) if self.return_probs else out


CASES = {
    # name: (module kwargs, q shape, kv shape, mask shape or None)
    "mul_scale_no_mask": (dict(scale_by="mul"), (2, 3, 17, 8), (2, 3, 17, 8), None),
    "div_scale_padding_mask": (dict(scale_by="div"), (2, 4, 21, 16), (2, 4, 21, 16), (2, 1, 1, 21)),
    "prescaled_query_full_mask": (dict(scale_by="none"), (1, 2, 9, 8), (1, 2, 30, 8), (1, 2, 9, 30)),
    "softmax_in_float32_then_cast": (dict(cast=True), (2, 2, 13, 8), (2, 2, 13, 8), (2, 1, 13, 13)),
}


def _mask(shape, seed):
    """An additive mask as HuggingFace builds it: 0 where a key is seen, the dtype's minimum elsewhere
    (every row keeps at least its first key)."""
    keep = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) < 0.7
    keep[..., 0] = True
    return torch.zeros(shape).masked_fill(~keep, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_attention_becomes_the_engines_flash_attention(name):
    kwargs, q_shape, kv_shape, mask_shape = CASES[name]
    module = EagerAttention(**kwargs)
    q, k, v = (randn(*s, seed=i).requires_grad_() for i, s in enumerate((q_shape, kv_shape, kv_shape)))
    mask = _mask(mask_shape, 7) if mask_shape else None
    since = fresh()
    compiled = torch.compile(module, backend="ort", fullgraph=True)
    out = compiled(q, k, v, mask)
    dy = randn(*out.shape, seed=9)
    grads = torch.autograd.grad(out, (q, k, v), dy)
    # reference: the eager chain in float64
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = module(*ref_in, None if mask is None else mask.double())
    ref_grads = torch.autograd.grad(ref, ref_in, dy.double())
    for got, want in zip((out, *grads), (ref, *ref_grads)):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert STATS.fused == 1, STATS
    ops = engine_op_types(since)
    assert {"FlashAttention", "FlashAttentionGrad"} <= ops, sorted(ops)
    assert "Softmax" not in ops and "SoftmaxGrad" not in ops, sorted(ops)


@pytest.mark.parametrize("model", ["gpt2", "bert", "llama"])
def test_hf_eager_attention_trains_on_flash_attention(model):
    """attn_implementation="eager" (dropout 0): 3 SGD steps beside eager, every layer's attention
    fused. LLaMA's key/value heads are repeated (repeat_kv) before the chain, which the fused op reads."""
    make, batch = {"gpt2": (cm.make_gpt2, cm.causal_lm_batch), "bert": (cm.make_bert_mlm, cm.bert_mlm_batch),
                   "llama": (cm.make_llama, cm.causal_lm_batch)}[model]
    since = fresh()
    check_training_matches_eager(functools.partial(make, "eager"), batch, backend="ort", steps=3, fullgraph=True)
    assert STATS.fused == 2, STATS  # the two layers of the test configs
    ops = engine_op_types(since)
    assert {"FlashAttention", "FlashAttentionGrad"} <= ops, sorted(ops)


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention without flash: a registered lower-triangular buffer, masked_fill with -inf
    (and, with `padding`, an additive mask before it)."""

    def __init__(self, seq: int, fill: float = float("-inf")) -> None:
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))
        self.fill = fill

    def forward(self, q, k, v, padding=None):
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if padding is not None:
            att = att + padding
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, self.fill)
        att = F.softmax(att, dim=-1)
        return att @ v


@pytest.mark.parametrize("padding", [False, True])
def test_masked_fill_attention_becomes_a_keep_mask(padding):
    module = CausalSelfAttention(32)
    q, k, v = (randn(2, 3, 19, 8, seed=i).requires_grad_() for i in range(3))
    extra = (_mask((2, 1, 1, 19), 5),) if padding else ()
    since = fresh()
    out = torch.compile(module, backend="ort", fullgraph=True)(q, k, v, *extra)
    dy = randn(*out.shape, seed=9)
    grads = torch.autograd.grad(out, (q, k, v), dy)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = module.double()(*ref_in, *(m.double() for m in extra))
    module.float()
    ref_grads = torch.autograd.grad(ref, ref_in, dy.double())
    for got, want in zip((out, *grads), (ref, *ref_grads)):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert STATS.fused == 1, STATS
    assert {"FlashAttention", "FlashAttentionGrad"} <= engine_op_types(since)


def test_masked_fill_with_a_finite_value_keeps_the_chain():
    """-1e4 (old BERT code) does not hide a key the way a keep mask does when every key of a row is
    hidden, so the chain stays as written."""
    module = CausalSelfAttention(16, fill=-1e4)
    q, k, v = (randn(1, 2, 9, 8, seed=i).requires_grad_() for i in range(3))
    _declined_and_matches_eager(module, [q, k, v], "the scores are filled with a finite value")


def test_autocast_attention_is_fused_with_its_float32_mask():
    """Under torch.autocast HuggingFace's float32 additive mask meets bfloat16 scores; the fused op
    takes it as it is (the engine adds it in float32). Against float64: within bfloat16's rounding of
    Q, K, V and the output (eager autocast also rounds the scores and probabilities)."""
    module = EagerAttention(cast=True)
    q, k, v = (randn(2, 2, 13, 8, seed=i).requires_grad_() for i in range(3))
    mask = _mask((2, 1, 13, 13), 7)
    since = fresh()

    def attend(q, k, v, mask):  # the projections autocast runs in bfloat16
        return module(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), mask)

    with torch.autocast("cpu", torch.bfloat16):
        out = torch.compile(attend, backend="ort", fullgraph=True)(q, k, v, mask)
        eager = attend(q, k, v, mask)
    assert out.dtype == torch.bfloat16
    ref = module(*(t.detach().double() for t in (q, k, v)), mask.double())
    ours, theirs = (out.double() - ref).abs().max().item(), (eager.double() - ref).abs().max().item()
    assert ours <= 2 * theirs + 2 ** -8, (ours, theirs)
    assert STATS.fused == 1, STATS
    assert "FlashAttention" in engine_op_types(since)


class RotaryAttention(nn.Module):
    """LLaMA's shape under autocast: bfloat16 projections, a float32 rotation (cos, sin) that promotes
    Q and K back to float32, V left in bfloat16, and HuggingFace's eager chain (softmax in float32,
    cast to the query's dtype)."""

    def forward(self, q, k, v, cos, sin, mask):
        q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))  # the projections autocast runs in bfloat16
        q, k = q * cos + q.flip(-1) * sin, k * cos + k.flip(-1) * sin  # float32, by type promotion
        scores = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(q.shape[-1])) + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, v)


def test_autocast_casts_of_float32_queries_are_written_out():
    """Q and K float32 beside a bfloat16 V: the matmuls' bfloat16 results prove autocast cast them, so
    the chain is fused with those casts written out. Output and the float32 gradients of Q, K, V
    against float64, within twice eager autocast's own error plus one bfloat16 rounding."""
    module = RotaryAttention()
    q, k, v = (randn(2, 2, 13, 8, seed=i).requires_grad_() for i in range(3))
    cos, sin = randn(1, 1, 13, 8, seed=4).cos(), randn(1, 1, 13, 8, seed=5).sin()
    mask = _mask((2, 1, 13, 13), 7)
    dy = randn(2, 2, 13, 8, seed=9)
    since = fresh()
    with torch.autocast("cpu", torch.bfloat16):
        out = torch.compile(module, backend="ort", fullgraph=True)(q, k, v, cos, sin, mask)
        ours = (out, *torch.autograd.grad(out, (q, k, v), dy))
        eager_out = module(q, k, v, cos, sin, mask)
        theirs = (eager_out, *torch.autograd.grad(eager_out, (q, k, v), dy))
    assert out.dtype == torch.bfloat16
    assert STATS.fused == 1 and STATS.autocast_casts == 1, STATS
    assert {"FlashAttention", "FlashAttentionGrad"} <= engine_op_types(since)
    # float64: the same function without autocast's roundings
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    rq, rk = (t * cos.double() + t.flip(-1) * sin.double() for t in ref_in[:2])
    ref_scores = rq @ rk.transpose(2, 3) / math.sqrt(8) + mask.double()
    ref = torch.softmax(ref_scores, -1) @ ref_in[2]
    exact = (ref, *torch.autograd.grad(ref, ref_in, dy.double()))
    for name, got, eager, want in zip(("out", "dq", "dk", "dv"), ours, theirs, exact):
        assert got.dtype == eager.dtype, name
        got, eager, want = got.detach().double(), eager.detach().double(), want.detach()
        err = float((got - want).norm() / want.norm())
        eager_err = float((eager - want).norm() / want.norm())
        assert err <= 2 * eager_err + 2 ** -8, (name, err, eager_err)


def test_mixed_dtypes_without_autocast_proof_are_not_cast():
    """The casts are written out only where the recorded dtypes prove autocast made them: outside
    autocast (all float32) the chain is fused as it is, with no cast; and a chain whose matmul
    recorded float32 beside a float32 query (no autocast at that op) gets none either."""
    from torch_ort_backend import attention_fusion as af

    q, k, v = (randn(1, 2, 9, 8, seed=i) for i in range(3))
    cos, sin, mask = randn(1, 1, 9, 8, seed=4).cos(), randn(1, 1, 9, 8, seed=5).sin(), _mask((1, 1, 9, 9), 2)

    class Float32Rotary(nn.Module):
        def forward(self, q, k, v, cos, sin, mask):
            q, k = q * cos + q.flip(-1) * sin, k * cos + k.flip(-1) * sin
            scores = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(q.shape[-1])) + mask
            return torch.matmul(F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)

    fresh()
    with torch.no_grad():
        out = torch.compile(Float32Rotary(), backend="ort", fullgraph=True)(q, k, v, cos, sin, mask)
        torch.testing.assert_close(out, Float32Rotary()(q, k, v, cos, sin, mask), rtol=1e-5, atol=1e-5)
    assert STATS.fused == 1 and STATS.autocast_casts == 0, STATS

    def meta(dtype):  # a node whose recorded (dynamo) value has this dtype
        node = torch.fx.Graph().placeholder("x")
        node.meta["example_value"] = torch.empty(1, 1, 2, 2, dtype=dtype, device="meta")
        return node

    f32, bf16 = torch.float32, torch.bfloat16
    probs = meta(f32)
    for q_dt, k_dt, v_dt, scores_dt, out_dt, want in [
            (f32, f32, bf16, bf16, bf16, bf16),  # LLaMA under autocast
            (bf16, bf16, bf16, bf16, bf16, None),  # nothing to cast
            (f32, f32, bf16, f32, bf16, None),  # Q @ K^T recorded float32: no autocast there
            (bf16, bf16, f32, bf16, f32, None),  # probs @ V recorded float32: no autocast there
            (torch.float64, f32, bf16, bf16, bf16, None)]:  # autocast never casts float64
        output = meta(out_dt)
        output.args = (probs, meta(v_dt))
        chain = af._Chain(meta(q_dt), meta(k_dt), output.args[1], meta(scores_dt), 1.0, None, None, output, [])
        assert af._autocast_dtype(chain) == want, (q_dt, k_dt, v_dt, scores_dt, out_dt)


def test_inference_runs_the_forward_only():
    module = EagerAttention(scale_by="div").eval()
    q, k, v = (randn(2, 2, 11, 8, seed=i) for i in range(3))
    mask = _mask((2, 1, 1, 11), 3)
    since = fresh()
    with torch.no_grad():
        got = torch.compile(module, backend="ort")(q, k, v, mask)
    torch.testing.assert_close(got, module(q, k, v, mask), rtol=1e-5, atol=1e-6)
    assert STATS.fused == 1
    assert "FlashAttention" in engine_op_types(since)


def _declined_and_matches_eager(module: nn.Module, inputs: list, reason: str, seed: int | None = None) -> None:
    since = fresh()
    twin = torch.compile(module, backend="ort")
    if seed is not None:
        torch.manual_seed(seed)
    got = twin(*inputs)
    if seed is not None:
        torch.manual_seed(seed)
    want = module(*inputs)
    got, want = (x if isinstance(x, tuple) else (x,) for x in (got, want))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    dy = [randn(*g.shape, seed=5 + i) for i, g in enumerate(got)]
    got_grads = torch.autograd.grad(got, leaves, dy)
    want_grads = torch.autograd.grad(want, leaves, dy)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert STATS.fused == 0 and reason in STATS.declined, STATS
    assert "FlashAttention" not in engine_op_types(since)
    assert tob.compile_stats().runs > 0


def test_dropout_in_training_is_left_to_torchs_random_stream():
    module = EagerAttention(dropout=0.3).train()
    q, k, v = (randn(2, 2, 9, 8, seed=i).requires_grad_() for i in range(3))
    _declined_and_matches_eager(module, [q, k, v], "dropout in training (the fused kernel cannot replay torch's "
                                "random stream)", seed=11)


def test_returned_probabilities_keep_the_chain():
    module = EagerAttention(return_probs=True)
    q, k, v = (randn(2, 2, 9, 8, seed=i).requires_grad_() for i in range(3))
    _declined_and_matches_eager(module, [q, k, v], "the probabilities are read elsewhere")


def test_a_mask_that_needs_a_gradient_keeps_the_chain():
    """T5's learned position bias is added like a mask; the fused kernel would give it no gradient."""
    module = EagerAttention()
    q, k, v = (randn(1, 2, 7, 8, seed=i).requires_grad_() for i in range(3))
    bias = randn(1, 2, 7, 7, seed=4).requires_grad_()
    _declined_and_matches_eager(module, [q, k, v, bias], "the mask requires grad (the fused kernel gives it none)")


def test_an_added_bool_tensor_is_not_a_keep_mask():
    module = EagerAttention()
    q, k, v = (randn(1, 2, 7, 8, seed=i).requires_grad_() for i in range(3))
    added = torch.rand(1, 1, 7, 7, generator=torch.Generator().manual_seed(3)) < 0.5
    _declined_and_matches_eager(module, [q, k, v, added], "the mask is not a floating tensor of the query's dtype (or float32 for 16-bit queries)")


@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_orttrainer_fuses_eager_attention(model):
    """ORTTrainer captures with torch.export: the same pass runs on its ATen graph before the joint
    graph is made. Three SGD steps give eager's losses; the training graph holds FlashAttentionGrad."""
    from torch_ort_backend import ORTTrainer, optim

    make, batch_of = {"gpt2": (cm.make_gpt2, cm.causal_lm_batch), "bert": (cm.make_bert_mlm, cm.bert_mlm_batch)}[model]
    net = make("eager")
    net.config.use_cache = False
    reference = copy.deepcopy(net)
    first = batch_of(0)
    with torch.no_grad():
        rank = net(**first)["logits"].dim()
    desc = {"inputs": [(n, list(t.shape)) for n, t in first.items()],
            "outputs": [("loss", [], True), ("logits", [f"d{i}" for i in range(rank)])]}
    STATS.reset()
    trainer = ORTTrainer(net, desc, optim.SGDConfig(lr=0.1))
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(3):
        batch = batch_of(step)
        loss = trainer.train_step(**batch)[0]
        sgd.zero_grad()
        want = reference(**batch)["loss"]
        want.backward()
        sgd.step()
        torch.testing.assert_close(loss, want.detach(), rtol=1e-5, atol=1e-6, msg=f"step {step}")
    assert STATS.fused == 2, STATS
    ops = {n.op_type for n in trainer._onnx_model.graph.node}
    assert {"FlashAttention", "FlashAttentionGrad", "SGDOptimizer"} <= ops, sorted(ops)
    assert "Softmax" not in ops


@pytest.mark.parametrize("variable", ["ORTMODULE_USE_EFFICIENT_ATTENTION", "ORTMODULE_ATEN_SDPA_FALLBACK"])
def test_the_switches_turn_the_fusion_off(variable, monkeypatch):
    monkeypatch.setenv(variable, "0")
    module = EagerAttention()
    q, k, v = (randn(2, 2, 9, 8, seed=i).requires_grad_() for i in range(3))
    since = fresh()
    out = torch.compile(module, backend="ort")(q, k, v)
    torch.testing.assert_close(out, module(q, k, v), rtol=1e-5, atol=1e-6)
    assert STATS.fused == 0 and not STATS.declined
    assert "FlashAttention" not in engine_op_types(since)


def test_a_bad_switch_value_is_named(monkeypatch):
    monkeypatch.setenv("ORTMODULE_USE_EFFICIENT_ATTENTION", "maybe")
    with pytest.raises(Exception) as info:
        torch.compile(EagerAttention(), backend="ort")(*(randn(1, 1, 3, 4, seed=i) for i in range(3)))
    inner = getattr(info.value, "inner_exception", info.value)  # dynamo wraps what a backend raises
    assert isinstance(inner, ValueError) and "ORTMODULE_USE_EFFICIENT_ATTENTION" in str(inner), inner
