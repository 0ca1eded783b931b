"""The compute optimizer's embedding case (compute_optimizer/embedding_sparsity.py, padding_check.py;
issue 19): the per-token layers run over the valid tokens only, and never change a loss or a gradient.

Same numbers: GPT-2, BERT and LLaMA (small configs) trained under "ort" with the embedding case on and
off give the same losses, valid-row outputs and every gradient (rtol 1e-5), with padding at the end
or in the middle of the sequences, with attention masks, and with no padding (which runs the dense
graph: the case must cost nothing there). The check at run time sends a batch whose mask does not
hide the padding, or whose labels count a padded token, to the dense graph with the dense numbers.
The pass declines models that mix tokens outside attention. Every test asserts which graph ran
(counters) and that the engine ran it.
"""

from __future__ import annotations

import copy
import functools
import logging
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from compile_harness import _call, flatten_outputs
from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend import ORTModule, compile_stats
from torch_ort_backend import compute_optimizer
from torch_ort_backend.compile_state import live_graphs
from torch_ort_backend.options import resolve
from torch_ort_backend.testing.models import extract_loss, generator, make_bert_mlm, make_gpt2, make_llama, token_ids

RTOL, ATOL = 1e-5, 1e-6
ON = {"enable_embedding_sparse_optimizer": True}
STATS = compute_optimizer.STATS


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    STATS.reset()
    yield from fresh_state(monkeypatch)


class LossOnly(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, **batch):
        return self.model(**batch).loss


# --- batches -----------------------------------------------------------------------------------------

PAD_ID = {"gpt2": 127, "bert": 0, "llama": 0}  # GPT-2 pads with its eos token; its embedding has no padding_idx


def lm_batch(step: int, name: str, padding: str, batch: int = 3, seq: int = 16, vocab: int = 128) -> dict:
    """A tokenizer-like padded batch: ids are the pad id where attention_mask is 0. padding: "end" (right
    padding of 1..seq/2 per row, the first row full), "middle" (a run inside each row but the first) or
    "none". Labels: causal LMs label every token but padding and the first token after a padding run (its
    predecessor is padding); BERT labels about half the real tokens."""
    gen = generator(step, 1919)
    ids = token_ids((batch, seq), vocab - 1, gen)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for row in range(1, batch):
        width = int(torch.randint(1, seq // 2, (1,), generator=gen))
        if padding == "end":
            mask[row, seq - width:] = 0
        elif padding == "middle":
            start = int(torch.randint(1, seq - width, (1,), generator=gen))
            mask[row, start:start + width] = 0
    ids = ids.masked_fill(mask == 0, PAD_ID[name])
    labels = ids.masked_fill(mask == 0, -100)
    out = {"input_ids": ids, "attention_mask": mask}
    if name == "bert":
        labels = labels.masked_fill(torch.rand(batch, seq, generator=gen) < 0.5, -100)
        labels[:, 0] = ids[:, 0]
        out["token_type_ids"] = torch.zeros_like(ids)
    else:
        after_padding = torch.zeros_like(mask, dtype=torch.bool)
        after_padding[:, 1:] = (mask[:, :-1] == 0) & (mask[:, 1:] == 1)
        labels = labels.masked_fill(after_padding, -100)
    out["labels"] = labels
    return out


MODELS = {"gpt2": make_gpt2, "bert": make_bert_mlm, "llama": make_llama}


# --- on vs off ---------------------------------------------------------------------------------------

def _sparse_forward_graphs() -> list:
    """The compiled forward graphs of the embedding case: engine sessions whose export restores the
    valid rows into the padded shape before attention (GatherGrad, which no dense forward holds)."""
    return [g for g in live_graphs() if g.stage == "forward" and g.session is not None
            and any(n.op_type == "GatherGrad" for n in g.exported.model.graph.node)]


def train_on_and_off(make_model, make_batch, steps: int = 2, on: dict | None = None, wrap=None, compile_fn=None,
                     mask_of=None):
    """Two copies of a model under "ort", the embedding case on and off, trained with SGD; at every step
    the loss, the valid rows of every output (`mask_of(batch)` marks them; padded rows of restored
    outputs are 0), every gradient and the updated parameters must match."""
    wrap = wrap or (lambda m: m)
    compile_fn = compile_fn or (lambda m, options: torch.compile(m, backend="ort", options=options))
    on_module = wrap(make_model())
    off_module = copy.deepcopy(on_module)
    on_c, off_c = compile_fn(on_module, on or ON), compile_fn(off_module, None)
    opt_on = torch.optim.SGD(on_module.parameters(), lr=0.05, momentum=0.9)
    opt_off = torch.optim.SGD(off_module.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        batch = make_batch(step)
        opt_on.zero_grad(set_to_none=True)
        opt_off.zero_grad(set_to_none=True)
        out_on, out_off = _call(on_c, batch), _call(off_c, batch)
        got, want = flatten_outputs(out_on), flatten_outputs(out_off)
        assert [p for p, _ in got] == [p for p, _ in want]
        valid = mask_of(batch).bool() if mask_of else None
        for (path, a), (_, b) in zip(got, want):
            if valid is not None and a.dim() >= 2 and a.shape[:2] == valid.shape:
                assert bool((a[~valid] == 0).all()), f"step {step}: {path}: padded rows of a restored output are 0"
                a, b = a[valid], b[valid]
            elif valid is not None and a.dim() == 4 and a.shape[0] == valid.shape[0] and a.shape[2] == valid.shape[1]:
                a, b = a.transpose(1, 2)[valid], b.transpose(1, 2)[valid]  # keys and values [B, heads, S, d]
            torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, msg=lambda m, p=path: f"step {step}: {p}: {m}")
        extract_loss(out_on).backward()
        extract_loss(out_off).backward()
        grads = dict(off_module.named_parameters())
        compared = 0
        for name, p in on_module.named_parameters():
            if p.grad is None:
                assert grads[name].grad is None, name
                continue
            torch.testing.assert_close(p.grad, grads[name].grad, rtol=RTOL, atol=ATOL,
                                       msg=lambda m, n=name: f"step {step}: gradient of {n}: {m}")
            compared += 1
        assert compared > 0
        opt_on.step()
        opt_off.step()
    assert STATS.untraceable == 0
    return on_module, off_module


def _mask(batch):
    return batch["attention_mask"]


@pytest.mark.parametrize("output", ["logits", "loss_only"])
@pytest.mark.parametrize("padding", ["end", "middle", "none"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_same_losses_and_gradients(name, padding, output):
    """The embedding case on (with the label case, both defaults aside) gives the unoptimised run's
    losses, valid outputs and gradients; the padded batches ran the graph over the valid tokens, the
    unpadded ones the dense graph."""
    runs = compile_stats().runs
    train_on_and_off(MODELS[name], functools.partial(lm_batch, name=name, padding=padding),
                     wrap=LossOnly if output == "loss_only" else None, mask_of=_mask)
    assert STATS.embedding_rewrites == 1 and STATS.embedding_declined == []
    if padding == "none":
        assert (STATS.embedding_sparse_calls, STATS.embedding_dense_calls) == (0, 2)
    else:
        assert (STATS.embedding_sparse_calls, STATS.embedding_dense_calls) == (2, 0)
        assert _sparse_forward_graphs(), "no compiled forward graph over the valid tokens"
    assert STATS.embedding_check_failures == 0
    assert compile_stats().runs - runs == 8  # forward and backward, both models, two steps: the engine ran all
    assert_engine_ran(8)
    moved = STATS.embedding_moved_ops
    assert moved["linear"] + moved["addmm"] >= 6, moved  # the projections and the MLP of both layers
    (plan,) = STATS.embedding_plans
    assert bool(plan.restored) == (output == "logits"), plan.restored  # the logits, restored to [B, S, V]


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_with_the_label_case_off(name):
    """Without the label case the loss reads the valid tokens' logits with their labels (the labels at
    padded rows are checked to be the ignore index)."""
    on = {**ON, "enable_label_sparse_optimizer": False}
    train_on_and_off(MODELS[name], functools.partial(lm_batch, name=name, padding="end"), on=on, mask_of=_mask)
    # the loss itself reads the valid rows (the CE's own rewrite; with the label case it reads a selection)
    assert STATS.embedding_sparse_calls == 2 and STATS.embedding_moved_ops["cross_entropy"] == 1


def test_ortmodule():
    train_on_and_off(make_llama, functools.partial(lm_batch, name="llama", padding="middle"),
                     compile_fn=lambda m, options: ORTModule(m, options=options), mask_of=_mask)
    assert STATS.embedding_sparse_calls == 2


def test_new_padding_reuses_the_graphs():
    """The valid-token count is a symbolic size: batches with other padding run the same sessions (no
    new export); a batch without padding runs the dense graph, compiled with the other (its backward
    when first needed, as AOTAutograd does), so neither ever recompiles."""
    model = torch.compile(LossOnly(make_gpt2()), backend="ort", options=ON)
    model(**lm_batch(0, "gpt2", "end")).backward()
    model(**lm_batch(1, "gpt2", "none")).backward()
    exports = compile_stats().exports
    assert exports == 4  # forward and backward of each
    for step, padding in ((2, "middle"), (3, "none"), (4, "end")):
        model(**lm_batch(step, "gpt2", padding)).backward()
    assert compile_stats().exports == exports
    assert (STATS.embedding_sparse_calls, STATS.embedding_dense_calls) == (3, 2)
    assert_engine_ran(10)


# --- the run-time check ---------------------------------------------------------------------------------

def test_a_mask_that_does_not_hide_padding_runs_the_dense_graph(caplog):
    """BERT's padding ids (padding_idx 0) with an all-ones attention mask: every token reads the padded
    ones, so the check fails; the dense graph runs, with the dense numbers, and says so once."""
    def batch(step):
        b = lm_batch(step, "bert", "end")
        b["attention_mask"] = torch.ones_like(b["attention_mask"])
        return b

    with caplog.at_level(logging.WARNING, logger="torch_ort_backend"):
        train_on_and_off(make_bert_mlm, batch, steps=2)
    assert STATS.embedding_check_failures == 2 and STATS.embedding_sparse_calls == 0
    (reason,) = STATS.embedding_failure_reasons
    assert "lets a valid query read a padded key" in reason
    messages = [r.getMessage() for r in caplog.records if "runs its dense graph" in r.getMessage()]
    assert len(messages) == 1, messages
    assert_engine_ran(8)


def test_a_label_on_a_padded_token_runs_the_dense_graph():
    """GPT-2 with padding in the middle and the token after each run labelled: the loss reads the logits
    of a padded position, so the dense graph runs (with and without the label case)."""
    def batch(step):
        b = lm_batch(step, "gpt2", "middle")
        b["labels"] = b["input_ids"].masked_fill(b["attention_mask"] == 0, -100)
        return b

    for label_case in (True, False):
        STATS.reset()
        torch._dynamo.reset()
        train_on_and_off(make_gpt2, batch, on={**ON, "enable_label_sparse_optimizer": label_case})
        assert STATS.embedding_check_failures == 2 and STATS.embedding_sparse_calls == 0, label_case


class TinyAttention(nn.Module):
    """embedding (padding_idx 0) -> attention with an additive mask `(1 - mask) * mask_value` -> residual
    -> optional token mixing -> vocabulary projection -> cross-entropy. `mix`: "mean" adds the mean over
    the sequence, "cumsum" takes the running sum, "first" adds the first token's state; "sdpa_nomask"
    attends without a mask."""

    def __init__(self, mask_value: float = torch.finfo(torch.float32).min, mix: str | None = None,
                 vocab: int = 40, hidden: int = 16, heads: int = 2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(vocab, hidden, padding_idx=0)
        self.qkv, self.out, self.head = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, vocab)
        self.heads, self.vocab, self.mask_value, self.mix = heads, vocab, mask_value, mix

    def forward(self, ids, mask, labels):
        b, s = ids.shape
        h = self.emb(ids)
        q, k, v = self.qkv(h).split(h.shape[-1], dim=-1)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        if self.mix == "sdpa_nomask":
            o = F.scaled_dot_product_attention(q, k, v)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            scores = scores + (1.0 - mask[:, None, None, :].float()) * self.mask_value
            o = scores.softmax(-1) @ v
        h = h + self.out(o.transpose(1, 2).reshape(b, s, -1))
        if self.mix == "mean":
            h = h + h.mean(1, keepdim=True)
        elif self.mix == "cumsum":
            h = h.cumsum(1)
        elif self.mix == "first":
            h = h + h[:, :1]
        return F.cross_entropy(self.head(h).view(-1, self.vocab), labels.view(-1))


def tiny_batch(step: int, seq: int = 12):
    gen = generator(step, 1923)
    ids = token_ids((3, seq), 40, gen)
    mask = torch.ones(3, seq, dtype=torch.int64)
    mask[1, seq - 4:] = 0
    mask[2, 3:6] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return (ids, mask, ids.masked_fill(mask == 0, -100))


def test_a_finite_mask_fires_and_a_weak_one_falls_back():
    """finfo.min masks the padded keys exactly (the check passes); -1e4 (old BERT) does not bound the
    padded keys' share for every score, so the check sends those calls to the dense graph."""
    train_on_and_off(TinyAttention, tiny_batch)
    assert STATS.embedding_sparse_calls == 2 and STATS.embedding_check_failures == 0
    STATS.reset()
    torch._dynamo.reset()
    train_on_and_off(functools.partial(TinyAttention, mask_value=-1e4), tiny_batch)
    assert STATS.embedding_sparse_calls == 0 and STATS.embedding_check_failures == 2
    assert_engine_ran(8)


@pytest.mark.parametrize("mix, op", [("mean", "mean"), ("cumsum", "cumsum"), ("first", "getitem"),
                                     ("sdpa_nomask", "scaled_dot_product_attention")])
def test_must_not_fire_where_tokens_mix_outside_a_masked_attention(mix, op):
    """A mean over the sequence, a running sum, a token picked by position, an attention without a mask:
    the padded tokens reach valid ones, so the pass declines the graph (naming the op) and only the
    dense graph is compiled; the numbers are eager's."""
    train_on_and_off(functools.partial(TinyAttention, mix=mix), tiny_batch)
    assert STATS.embedding_rewrites == 0 and STATS.embedding_sparse_calls == 0
    assert len(STATS.embedding_declined) == 1 and op in STATS.embedding_declined[0], STATS.embedding_declined
    assert_engine_ran(8)


# --- the switches ------------------------------------------------------------------------------------------

def _fires(monkeypatch, env: dict, options: dict | None) -> bool:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    STATS.reset()
    torch._dynamo.reset()
    model = torch.compile(TinyAttention(), backend="ort", options=options)
    model(*tiny_batch(0)).backward()
    assert_engine_ran(2)
    for k in env:
        monkeypatch.delenv(k)
    return STATS.embedding_sparse_calls == 1


def test_off_by_default_as_in_the_reference(monkeypatch):
    assert not resolve(None, environ={}).enable_embedding_sparse_optimizer
    assert not _fires(monkeypatch, {}, None)


@pytest.mark.parametrize("env, options, fires", [
    ({"ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER": "1"}, None, True),
    ({}, ON, True),
    ({"ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER": "0"}, ON, False),  # the variable overrides the code
    ({"ORTMODULE_ENABLE_COMPUTE_OPTIMIZER": "0"}, ON, False),
    ({"ORTMODULE_ENABLE_SPARSE_OPTIMIZER": "0"}, ON, False),
    ({"ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER": "0"}, ON, True),
    ({}, {**ON, "enable_compute_optimizer": False}, False),
])
def test_switches(env, options, fires, monkeypatch):
    assert _fires(monkeypatch, env, options) is fires


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER must be a boolean"):
        resolve(None, environ={"ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER": "sometimes"})
    with pytest.raises(ValueError, match="option 'enable_embedding_sparse_optimizer' must be a boolean"):
        resolve({"enable_embedding_sparse_optimizer": "sometimes"}, environ={})
    with pytest.raises(ValueError, match="option 'enable_embedding_sparse_optimizer' must be a boolean"):
        ORTModule(TinyAttention(), options={"enable_embedding_sparse_optimizer": 2})


def _calls(gm: torch.fx.GraphModule) -> list[str]:
    return [n.target if isinstance(n.target, str) else n.target.__name__ for n in gm.graph.nodes
            if n.op in ("call_function", "call_method")]


@pytest.mark.parametrize("fused", [True, False], ids=["attention_fused", "attention_eager"])
def test_golden_rewrite_of_a_small_attention_model(fused):
    """With attention fusion on (the default) the eager attention chain is one scaled_dot_product_attention
    by the time the pass reads the graph; with it off the pass reads the eager chain. Before: embedding -> qkv linear -> split -> heads (view, transpose) -> attention -> transpose back ->
    reshape -> out linear -> residual -> head linear -> cross_entropy. After (label case off): the ids'
    valid rows are embedded; the qkv projection runs on them; q, k and v are restored to the padded shape
    (index_add into zeros) right before their transposes into heads; the attention output is gathered
    back after its transpose, so the output projection, the residual, the head and the loss run on the
    valid rows (the loss with its labels taken at those rows)."""
    options = {**ON, "enable_label_sparse_optimizer": False, "use_efficient_attention": fused}
    model = torch.compile(TinyAttention(), backend="ort", options=options)
    model(*tiny_batch(0)).backward()
    (plan,) = STATS.embedding_plans
    calls = _calls(plan.gm)
    assert calls.count("index_add") == 3, calls  # q, k, v restored for the attention
    embedding = next(n for n in plan.gm.graph.nodes if n.op == "call_function" and n.target is F.embedding)
    ids = embedding.args[0]
    assert ids.target is torch.index_select and ids.args[2].name.startswith("view"), ids  # ids[rows]
    first_restore = calls.index("index_add")
    assert calls.index("linear") < first_restore  # the qkv projection runs on the valid rows
    after = calls[first_restore:]
    gather_back = len(calls) - after[::-1].index("index_select") - 1  # the last gather: the labels' rows
    assert calls[gather_back + 1:].count("cross_entropy") == 1
    assert calls.count("linear") == 3  # qkv, out, head: each once, on the valid rows
    assert plan.restored == [] and len(plan.attentions) == 1 and plan.attentions[0].kind == ("sdpa" if fused else "eager")
    assert dict(plan.moved_ops)["linear"] == 3 and plan.moved_ops["cross_entropy"] == 1
    assert STATS.embedding_sparse_calls == 1
    assert_engine_ran(2)
