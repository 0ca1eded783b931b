"""The compute optimizer's label case (torch_ort_backend/compute_optimizer/, issue 19): cross-entropy,
and the per-token layers that only feed it, computed over the valid labels only.

Same numbers: GPT-2, BERT and LLaMA (small configs) trained under "ort" with the optimizer on and
off give the same losses, outputs and every gradient (rtol 1e-5), with padding at the end or in
the middle of the sequences, with attention masks, and with no padding at all; and the pass fired
(compile_stats().label_sparse_rewrites, the ops it moved) while the engine ran every graph.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from compile_harness import _call, flatten_outputs
from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend import ORTModule, compile_stats
from torch_ort_backend import compute_optimizer
from torch_ort_backend.compute_optimizer import rewrite_label_sparsity
from torch_ort_backend.options import resolve
from torch_ort_backend.testing.models import (extract_loss, generator, make_bert_mlm,
                                              make_gpt2, make_llama, token_ids)

RTOL, ATOL = 1e-5, 1e-6
OFF = {"enable_compute_optimizer": False}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    compute_optimizer.STATS.reset()
    yield from fresh_state(monkeypatch)


class LossOnly(nn.Module):
    """The model's loss and nothing else (optimum's ModuleWithLoss): the logits leave no graph, so the
    selection of the valid rows can move above the vocabulary projection."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, **batch):
        return self.model(**batch).loss


# --- batches: padding at the end, in the middle, none -------------------------------------------------

def _lm_batch(step: int, padding: str, batch: int = 3, seq: int = 16, vocab: int = 128, masked_lm: bool = False):
    """input_ids, attention_mask, labels (-100 where the mask is 0; for a masked LM also on ~half the
    real tokens). padding: "end" (right padding of 1..seq/2 per row, the first row full), "middle" (a
    run of padding inside each row but the first) or "none"."""
    gen = generator(step, 19)
    ids = token_ids((batch, seq), vocab, gen)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for row in range(1, batch):
        width = int(torch.randint(1, seq // 2, (1,), generator=gen))
        if padding == "end":
            mask[row, seq - width:] = 0
        elif padding == "middle":
            start = int(torch.randint(1, seq - width, (1,), generator=gen))
            mask[row, start:start + width] = 0
    labels = ids.masked_fill(mask == 0, -100)
    if masked_lm:
        labels = labels.masked_fill(torch.rand(batch, seq, generator=gen) < 0.5, -100)
        labels[:, 0] = ids[:, 0]
    out = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    if masked_lm:
        out["token_type_ids"] = torch.zeros_like(ids)
    return out


MODELS = {
    "gpt2": (make_gpt2, _lm_batch),
    "bert": (make_bert_mlm, functools.partial(_lm_batch, masked_lm=True)),
    "llama": (make_llama, _lm_batch),
}


# --- optimizer on vs off -------------------------------------------------------------------------------

def _train_on_and_off(make_model, make_batch, steps: int = 2, wrap=None, compile_fn=None, untraceable: int = 0):
    """Trains two copies of one model under "ort", the compute optimizer on (the default) and off, with
    SGD; asserts at every step that every output, every gradient and the updated parameters match."""
    wrap = wrap or (lambda m: m)
    compile_fn = compile_fn or (lambda m, options: torch.compile(m, backend="ort", options=options))
    on_module = wrap(make_model())
    off_module = copy.deepcopy(on_module)
    on, off = compile_fn(on_module, None), compile_fn(off_module, OFF)
    opt_on = torch.optim.SGD(on_module.parameters(), lr=0.05, momentum=0.9)
    opt_off = torch.optim.SGD(off_module.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        batch = make_batch(step)
        opt_on.zero_grad(set_to_none=True)
        opt_off.zero_grad(set_to_none=True)
        out_on, out_off = _call(on, batch), _call(off, batch)
        got, want = flatten_outputs(out_on), flatten_outputs(out_off)
        assert [p for p, _ in got] == [p for p, _ in want]
        for (path, a), (_, b) in zip(got, want):
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
    assert_engine_ran(4 * steps)
    assert compute_optimizer.STATS.untraceable == untraceable


@pytest.mark.parametrize("padding", ["end", "middle", "none"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_loss_only_models_select_rows_before_the_vocabulary_projection(name, padding):
    """Only the loss leaves the graph: the selection moves above lm_head (and BERT's transform), and the
    losses and gradients equal the unoptimised run's."""
    make_model, make_batch = MODELS[name]
    _train_on_and_off(make_model, functools.partial(make_batch, padding=padding), wrap=LossOnly)
    assert compile_stats().label_sparse_rewrites == 1
    moved = compute_optimizer.STATS.moved_ops
    assert moved["linear"] >= 1, moved  # the vocabulary projection runs on the valid rows only
    if name == "bert":  # the MLM transform: dense, gelu, layer norm, then the decoder
        # and the encoder's last layer norm, whose input is a residual sum of two row tensors
        assert moved["linear"] == 2 and moved["layer_norm"] == 2 and moved["gelu"] == 1, moved


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_returning_logits_keep_them_whole(name):
    """HuggingFace models given labels also return the logits: they keep every row (checked against
    the unoptimised run's), so only the loss runs over the valid rows, as onnxruntime-training's
    InsertGatherBeforeSceLoss did."""
    make_model, make_batch = MODELS[name]
    _train_on_and_off(make_model, functools.partial(make_batch, padding="end"))
    assert compile_stats().label_sparse_rewrites == 1
    assert compute_optimizer.STATS.moved_ops["linear"] == 0, compute_optimizer.STATS.moved_ops
    (rewrite,) = compute_optimizer.STATS.rewrites
    assert rewrite.moved_ops in ((), ("float",)), rewrite


def _fails_under_tracing(x):
    raise RuntimeError("a rewrite AOTAutograd cannot trace")


def test_a_rewrite_that_cannot_be_traced_compiles_the_graph_as_it_came(monkeypatch):
    """The label rewrite is undone when AOTAutograd cannot trace it, and the original graph (with
    TorchDynamo's placeholder sources, which a copied graph lacks) compiles and runs on the engine
    with the same numbers as the optimizer off. Simulated: the rewrite adds a node that raises."""
    real = compute_optimizer.rewrite_label_sparsity

    def rewrite_then_break(gm):
        rewrites = real(gm)
        if rewrites:
            first = next(iter(gm.graph.find_nodes(op="placeholder")))
            with gm.graph.inserting_after(first):
                gm.graph.call_function(_fails_under_tracing, (first,))
            gm.recompile()
        return rewrites

    monkeypatch.setattr(compute_optimizer, "rewrite_label_sparsity", rewrite_then_break)
    _train_on_and_off(make_gpt2, functools.partial(_lm_batch, padding="end"), wrap=LossOnly, untraceable=1)
    assert compile_stats().label_sparse_rewrites == 0


def test_ortmodule_runs_the_pass_and_the_option_turns_it_off():
    _train_on_and_off(make_gpt2, functools.partial(_lm_batch, padding="middle"), wrap=LossOnly,
                      compile_fn=lambda m, options: ORTModule(m, options=options))
    # one graph of the two was rewritten: the switched-off one was not
    assert compile_stats().label_sparse_rewrites == 1


def test_a_new_valid_count_reuses_the_graph():
    """The number of valid rows is a symbolic size of the exported graphs, so batches with other
    padding run the same sessions: no recompile, no new export."""
    model = torch.compile(LossOnly(make_gpt2()), backend="ort")
    model(**_lm_batch(0, "end")).backward()
    exports = compile_stats().exports
    for step, padding in ((1, "middle"), (2, "none"), (3, "end")):
        model(**_lm_batch(step, padding)).backward()
    assert compile_stats().exports == exports
    assert compile_stats().label_sparse_rewrites == 1
    assert_engine_ran(8)


@pytest.mark.parametrize("variable, value, fires", [
    ("ORTMODULE_ENABLE_COMPUTE_OPTIMIZER", "0", False),
    ("ORTMODULE_ENABLE_SPARSE_OPTIMIZER", "0", False),
    ("ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER", "0", False),
    ("ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER", "1", True),
])
def test_each_variable_switches_the_label_case(variable, value, fires, monkeypatch):
    monkeypatch.setenv(variable, value)
    model = torch.compile(LossOnly(make_gpt2()), backend="ort")
    model(**_lm_batch(0, "end")).backward()
    assert (compile_stats().label_sparse_rewrites == 1) is fires
    assert_engine_ran(2)


def test_defaults_are_the_reference_defaults():
    opts = resolve(None, environ={})
    assert opts.enable_compute_optimizer and opts.enable_sparse_optimizer and opts.enable_label_sparse_optimizer
    assert not opts.enable_embedding_sparse_optimizer


# --- the pass on small graphs: where the selection goes, and where it must not fire -----------------

class Head(nn.Module):
    """x + mean(x) -> layer_norm -> linear -> gelu -> linear (vocabulary) -> cross-entropy of the logits
    viewed 2-D. The residual with a per-row mean is not row-wise in x (its other operand has a row
    dimension), so it is where the selection stops."""

    def __init__(self, hidden: int = 8, vocab: int = 11, return_logits: bool = False, **loss_args) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm, self.dense, self.out = nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, vocab)
        self.vocab, self.return_logits, self.loss_args = vocab, return_logits, loss_args

    def forward(self, x, labels):
        h = x + x.mean(-1, keepdim=True)
        logits = self.out(F.gelu(self.dense(self.norm(h))))
        loss = F.cross_entropy(logits.view(-1, self.vocab), labels.view(-1), **self.loss_args)
        return (loss, logits) if self.return_logits else loss


def _rewrites_of(module: nn.Module, *args) -> tuple[list, torch.fx.GraphModule]:
    """Runs the pass on dynamo's graph of module(*args) (through a capturing backend that then runs
    the rewritten graph eagerly); returns the rewrites and the rewritten graph."""
    seen: dict = {}

    def backend(gm, example_inputs):
        seen["rewrites"] = rewrite_label_sparsity(gm)
        seen["gm"] = gm
        return gm.forward

    torch._dynamo.reset()
    torch.compile(module, backend=backend)(*args)
    return seen["rewrites"], seen["gm"]


def _targets(gm: torch.fx.GraphModule) -> list[str]:
    return [n.target if isinstance(n.target, str) else n.target.__name__ for n in gm.graph.nodes
            if n.op in ("call_function", "call_method")]


def _head_inputs(step: int = 0, ignore_index: int = -100):
    gen = generator(step, 23)
    x = torch.randn(3, 5, 8, generator=gen)
    labels = torch.randint(0, 11, (3, 5), generator=gen)
    labels[1, 2:] = ignore_index
    labels[2, :1] = ignore_index
    return x, labels


def test_golden_selection_moves_through_every_row_wise_op():
    """Before: x + mean(x) -> layer_norm -> linear -> gelu -> linear -> view -> cross_entropy. After: the
    valid rows of x + mean(x) are selected, the head runs on them, and cross_entropy reads the
    selected labels; the original head is gone."""
    (rewrite,), gm = _rewrites_of(Head(), *_head_inputs())
    assert rewrite.moved_ops == ("layer_norm", "linear", "gelu", "linear"), rewrite
    assert _targets(gm) == ["mean", "add", "view", "ne", "nonzero", "view", "index_select", "flatten",
                            "index_select", "layer_norm", "linear", "gelu", "linear", "cross_entropy"], _targets(gm)


def test_golden_logits_returned_selects_at_the_loss():
    """The logits are an output: every row of them is still computed, by the one original head, and
    the selection is of the logits' rows."""
    (rewrite,), gm = _rewrites_of(Head(return_logits=True), *_head_inputs())
    assert rewrite.moved_ops == (), rewrite
    targets = _targets(gm)
    assert targets.count("linear") == 2 and targets.count("layer_norm") == 1, targets
    assert targets[-7:] == ["ne", "nonzero", "view", "index_select", "flatten", "index_select",
                            "cross_entropy"], targets


@pytest.mark.parametrize("loss_args", [{"reduction": "none"}, {"label_smoothing": 0.1}])
def test_must_not_fire(loss_args):
    """reduction='none' returns one loss per row, padding included; label smoothing is left alone."""
    rewrites, _ = _rewrites_of(Head(**loss_args), *_head_inputs())
    assert rewrites == []


def test_must_not_fire_on_class_probabilities():
    """Soft targets (a distribution per row) have no ignore index."""
    linear = nn.Linear(8, 11)

    def loss(x, probs):
        return F.cross_entropy(linear(x), probs)

    rewrites, _ = _rewrites_of(loss, torch.randn(6, 8), torch.softmax(torch.randn(6, 11), dim=-1))
    assert rewrites == []


@pytest.mark.parametrize("loss_args", [{}, {"reduction": "sum"}, {"ignore_index": 3},
                                       {"weight": torch.linspace(0.5, 2.0, 11)}])
def test_head_on_and_off_under_ort(loss_args):
    """The small head under "ort": mean, sum, another ignore index, class weights."""
    def make():
        return Head(**loss_args)

    def batch(step):
        return _head_inputs(step, loss_args.get("ignore_index", -100))

    _train_on_and_off(make, batch)
    assert compile_stats().label_sparse_rewrites == 1


def test_every_label_ignored_gives_what_the_unoptimised_run_gives():
    """No valid row: the mean over none is NaN in both runs (0 / 0), and the sum is 0 with zero gradients."""
    for reduction in ("mean", "sum"):
        torch._dynamo.reset()
        x, labels = _head_inputs()
        labels[:] = -100
        on_m = Head(reduction=reduction)
        off_m = copy.deepcopy(on_m)
        on = torch.compile(on_m, backend="ort")
        off = torch.compile(off_m, backend="ort", options=OFF)
        a, b = on(x, labels), off(x, labels)
        torch.testing.assert_close(a, b, equal_nan=True)
        if reduction == "sum":
            a.backward()
            b.backward()
            for (name, p), q in zip(on_m.named_parameters(), off_m.parameters()):
                torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert compile_stats().label_sparse_rewrites == 2


def test_dynamic_sequence_lengths():
    """A new sequence length makes dynamo recompile with a symbolic length (s0) beside the unbacked
    row count (u0): still the unoptimised run's numbers at every length."""
    make = functools.partial(_lm_batch, padding="end")
    lengths = {0: 16, 1: 24, 2: 32}
    _train_on_and_off(make_gpt2, lambda step: make(step, seq=lengths[step]), steps=3, wrap=LossOnly)
    assert compile_stats().label_sparse_rewrites >= 2  # the static graph, then the dynamic one
