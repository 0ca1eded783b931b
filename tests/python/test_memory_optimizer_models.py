"""The memory optimizer on GPT-2, BERT and LLaMA (small configs, dropout on): every level trains with
the same losses and gradients as level 0, bit for bit (recompute replays the same kernels, and
dropout replays the forward's random numbers), while the forward stashes less; and on a transformer
whose activations dominate, level 1's step peak is clearly below level 0's."""

from __future__ import annotations

import gc

from torch_ort_backend.compiled_graph import live_graphs
import functools
import operator
import re

import pytest
import torch

from torch_ort_backend.testing.models import bert_mlm_batch, causal_lm_batch, make_bert_mlm, make_gpt2, make_llama
from memory_optimizer_harness import assert_identical, graph_memory, train
from ortmodule_helpers import fresh_state

MODELS = {
    # 3 layers, so level 1 (every layer but the last) recomputes two of them
    "gpt2": (functools.partial(make_gpt2, layers=3, dropout=0.1), causal_lm_batch, "GPT2Block"),
    "bert": (functools.partial(make_bert_mlm, layers=3, dropout=0.1), bert_mlm_batch, "BertLayer"),
    "llama": (functools.partial(make_llama, layers=3, dropout=0.1), causal_lm_batch, "LlamaDecoderLayer"),
}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    # memory_stats() reports every live graph that has run: graphs an earlier test still holds must
    # not count here, so their run counters are cleared (they report again only if they run again).
    gc.collect()
    for g in live_graphs():
        if getattr(g, "memory", None) is not None:
            g.memory.runs = 0
    yield from fresh_state(monkeypatch)


def _stashed(run) -> tuple[int, int]:
    """(without plans, with the plans on) from the report's 'stashed activations' line."""
    m = re.search(r"stashed activations: ([\d,]+) bytes without plans(?:, ([\d,]+) bytes with the plans on)?",
                  run.reports[0])
    assert m, run.reports[0]
    before = int(m.group(1).replace(",", ""))
    return before, int(m.group(2).replace(",", "")) if m.group(2) else before


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_level_trains_like_level_0(name):
    make_model, make_batch, layer_class = MODELS[name]
    model = make_model()
    level0 = train(model, make_batch, {"memory_opt_level": 0})
    assert "Memory Optimizer: OFF" in level0.reports[0] and f"({layer_class})" in level0.reports[0]
    assert level0.replayed_dropouts == 0
    previous = _stashed(level0)[0]
    for level in (1, 2):
        run = train(model, make_batch, {"memory_opt_level": level})
        assert_identical(level0, run, f"{name} at memory_opt_level {level}")
        head = run.reports[0].splitlines()[0]
        expected = "TransformerLayer:1:2" if level == 1 else "TransformerLayer:1:-1"
        assert head.startswith(f"Memory Optimizer: ON (memory_opt_level {level}") and expected in head, head
        assert run.replayed_dropouts > 0, "the recomputed layers' dropouts must replay the forward's random numbers"
        before, after = _stashed(run)
        assert before == _stashed(level0)[0] and after < previous, (level, before, after, previous)
        previous = after
        assert graph_memory(run, "backward")["saved_bytes"] < graph_memory(level0, "backward")["saved_bytes"]


def test_level_1_peak_is_clearly_below_level_0_when_activations_dominate():
    """GPT-2 at hidden 64, 4 layers, batch 4 x 128 tokens: activations are ~30x the parameters. The
    engine's step peak (memory_stats) at levels 1 and 2 must be well below level 0's, and the
    forward's peak (its stash) shrinks level by level. (Level 2's step peak is barely below level
    1's: with the stash donated to the backward, level 1's last layer is freed as its backward reads
    it, while level 2 recomputes it: 8.75 against 8.85 MB on 2026-11-27, so the two are not ordered.)"""
    model = make_gpt2(hidden=64, layers=4, heads=4, positions=128, dropout=0.1)
    batch = functools.partial(causal_lm_batch, batch=4, seq=128)
    runs = {level: train(model, batch, {"memory_opt_level": level}, steps=2) for level in (0, 1, 2)}
    peaks = {level: run.memory["step_peak_bytes"] for level, run in runs.items()}
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert graph_memory(runs[0], "backward")["saved_bytes"] > 10 * params, "activations must dominate"
    assert peaks[1] < 0.75 * peaks[0] and peaks[2] < 0.75 * peaks[0], peaks
    forward = {level: run.memory["forward_peak_bytes"] for level, run in runs.items()}
    assert forward[2] < forward[1] < forward[0], forward
    for level in (1, 2):
        assert_identical(runs[0], runs[level], f"memory_opt_level {level}")
    for run in runs.values():
        bw, fw = graph_memory(run, "backward"), graph_memory(run, "forward")
        assert bw["step_peak_bytes"] == bw["saved_bytes"] - bw["donated_bytes"] + bw["peak_live_bytes"]
        assert fw["peak_live_bytes"] >= fw["peak_bytes"] > 0


@pytest.mark.parametrize("name,dropouts_per_layer", [("gpt2", 3), ("llama", 1)])
def test_a_recomputed_layer_stashes_its_output_alone(name, dropouts_per_layer):
    """Level 1 recomputes every layer but the last, keeping only what enters the next one: one more
    layer adds exactly its output ([batch, seq, hidden] floats) and the random-number state of each
    of its replayed dropouts to what the backward reads (AOTAutograd hands the backward the
    tensors themselves: their bytes are measured, not estimated). Nodes the backward alone reads (a
    transposed operand of a matrix product's gradient) are not the forward's: counted as forward,
    they made the attention's batched operands look like layer outputs, and GPT-2 stashed three of
    them per recomputed layer."""
    make_model, make_batch, _ = MODELS[name]
    batch, seq, hidden = 2, 16, 32
    saved = {}
    for layers in (3, 4):
        for g in live_graphs():  # graphs still alive from the previous size no longer report
            g.memory.runs = 0
        model = make_model(layers=layers)
        model.config.use_cache = False  # else each layer's key/value cache is an output of the graph
        run = train(model, functools.partial(make_batch, batch=batch, seq=seq), {"memory_opt_level": 1})
        assert f"TransformerLayer:1:{layers - 1}" in run.reports[0].splitlines()[0], run.reports[0]
        saved[layers] = graph_memory(run, "backward")["saved_bytes"]
    rng_state = torch.get_rng_state().numel()
    assert saved[4] - saved[3] == batch * seq * hidden * 4 + dropouts_per_layer * rng_state, saved


def test_level_1_runs_without_an_arena_and_holds_less_than_with_one():
    """At level 1 the training graphs allocate each intermediate when made and free it after its
    last reader, instead of planning an arena whose pages stay resident to the end of each run: the
    memory the engine makes the process hold over a step (step_held_bytes, an arena counted whole)
    drops, the live peak (step_peak_bytes) stays, and no number changes."""
    from torch_ort_backend.compiled_graph import CompiledGraph

    model = make_gpt2(hidden=64, layers=4, heads=4, positions=128, dropout=0.1)

    def batch(step):  # one batch: the backward's shapes (the count of real labels) stay, so it is planned
        return causal_lm_batch(0, batch=4, seq=128)

    without = train(model, batch, {"memory_opt_level": 1}, steps=3)
    stats = {stage: graph_memory(without, stage) for stage in ("forward", "backward")}
    runs = [g.session.last_run_stats() for g in live_graphs() if g.memory.runs]
    # the forward, the backward of the first step and, from the second on, its variant without the
    # logits' tangent (zero_tangents.py)
    assert len(runs) == 3
    for last in runs:
        assert not last["planned"] and last["arena_bytes"] == 0, last
        assert last["peak_held_bytes"] == last["peak_live_bytes"], last
    original = CompiledGraph._arena_policy
    try:
        # The arena as level 1 planned it before: taken for each run and freed after it.
        CompiledGraph._arena_policy = lambda self: (True, self.stage in ("forward", "backward"))
        with_arena = train(model, batch, {"memory_opt_level": 1}, steps=3)
    finally:
        CompiledGraph._arena_policy = original
    assert_identical(with_arena, without, "level 1 with and without an arena")
    arena = {stage: graph_memory(with_arena, stage) for stage in ("forward", "backward")}
    # an arena is planned from a graph's second run on: the forward and the backward's variant
    # (the first step's backward ran once)
    planned = [g.session.last_run_stats() for g in live_graphs() if g.memory.runs >= 2]
    assert len(planned) == 2 and all(last["planned"] and last["arena_bytes"] > 0 for last in planned), planned
    for stage in ("forward", "backward"):
        assert arena[stage]["peak_live_bytes"] == stats[stage]["peak_live_bytes"], stage
        assert arena[stage]["peak_held_bytes"] > arena[stage]["peak_live_bytes"], arena[stage]
        assert stats[stage]["step_held_bytes"] < arena[stage]["step_held_bytes"], (stage, stats, arena)
    assert without.memory["step_held_bytes"] < with_arena.memory["step_held_bytes"]


def _newest_serial() -> int:
    return max((g.serial for g in live_graphs()), default=-1)


def _saved_dropout_outputs_of_softmax(after: int) -> int:
    """Forward outputs (the stash) of the graphs compiled after serial `after` that are a dropout's
    output over a softmax: attention's dropped-out probabilities."""
    return len(_saved_roots(after, lambda root: (
        root.target is operator.getitem and root.args[1] == 0
        and root.args[0].target is torch.ops.aten.native_dropout.default
        and root.args[0].args[0].target is torch.ops.aten._softmax.default)))


@pytest.mark.parametrize("name,heads", [("gpt2", 2), ("llama", 4)])
def test_level_1_rebuilds_what_the_backward_makes_from_its_stash(name, heads, monkeypatch):
    """Level 1 does not stash the last layer's dropped-out attention probabilities (rebuilt from
    the softmax and the mask, which the backward reads anyway: free_rebuild.py), and trains bit for
    bit as level 0 and as level 1 without the rebuild, whose backward reads at least the
    probabilities' [batch, heads, seq, seq] floats more."""
    from torch_ort_backend.memory_optimizer import partition

    make_model, make_batch, _ = MODELS[name]
    model = make_model()
    level0 = train(model, make_batch, {"memory_opt_level": 0})
    serial = _newest_serial()
    run = train(model, make_batch, {"memory_opt_level": 1})
    assert _saved_dropout_outputs_of_softmax(serial) == 0
    assert_identical(level0, run, f"{name} at memory_opt_level 1")
    with monkeypatch.context() as m:
        m.setattr(partition, "rebuild_dropout_outputs", lambda joint, readers: 0)
        gc.collect()
        for g in live_graphs():
            g.memory.runs = 0
        serial = _newest_serial()
        plain = train(model, make_batch, {"memory_opt_level": 1})
        assert _saved_dropout_outputs_of_softmax(serial) == 1  # the last layer's
    assert_identical(plain, run, f"{name} at memory_opt_level 1 without the rebuilds")
    batch, seq = 2, 16  # causal_lm_batch's
    saved, saved_plain = (graph_memory(r, "backward")["saved_bytes"] for r in (run, plain))
    assert saved_plain - saved >= batch * heads * seq * seq * 4, (saved_plain, saved)


def _saved_roots(after: int, predicate) -> list:
    """The stashed values (alias roots of the forward's saved outputs, not parameters or inputs) of
    the forward graphs compiled after serial `after` for which `predicate(root)` holds."""
    from torch_ort_backend.memory_optimizer.analysis import alias_root

    found = []
    for g in live_graphs():
        if g.serial <= after or g.stage != "forward" or g.gm is None:
            continue
        output = next(iter(g.gm.graph.find_nodes(op="output")))
        for value in output.args[0]:
            root = alias_root(value) if isinstance(value, torch.fx.Node) else None
            if root is not None and root.op == "call_function" and predicate(root):
                found.append(root)
    return found


def _is_pointwise_product(node) -> bool:
    # an RMSNorm's output (x * rstd * w), SwiGLU's product (silu(gate) * up), a tanh GELU's output
    return node.target is torch.ops.aten.mul.Tensor


def _retrain_without(monkeypatch, name: str, model, make_batch, count):
    """Level 1 with free_rebuild's `name` switched off (partition.py's reference to it)."""
    from torch_ort_backend.memory_optimizer import partition

    with monkeypatch.context() as m:
        m.setattr(partition, name, lambda *args: 0)
        gc.collect()
        for g in live_graphs():
            g.memory.runs = 0
        serial = _newest_serial()
        plain = train(model, make_batch, {"memory_opt_level": 1})
        return plain, count(serial)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_level_1_rebuilds_pointwise_values_from_what_the_backward_reads(name, monkeypatch):
    """The last (not recomputed) layer's values that a few pointwise ops make from values stashed
    anyway (LLaMA: the RMSNorms' outputs and SwiGLU's product; GPT-2: the tanh GELU's output) are
    rebuilt by the backward instead of stashed (free_rebuild.py, rebuild_elementwise_from_stash):
    the forward stashes fewer bytes, and the numbers are level 0's, bit for bit."""
    make_model, make_batch, _ = MODELS[name]
    model = make_model()
    level0 = train(model, make_batch, {"memory_opt_level": 0})
    serial = _newest_serial()
    run = train(model, make_batch, {"memory_opt_level": 1})
    products = _saved_roots(serial, _is_pointwise_product)
    assert_identical(level0, run, f"{name} at memory_opt_level 1")
    plain, plain_products = _retrain_without(monkeypatch, "rebuild_elementwise_from_stash", model, make_batch,
                                             lambda after: len(_saved_roots(after, _is_pointwise_product)))
    assert_identical(plain, run, f"{name} at memory_opt_level 1 without the pointwise rebuilds")
    assert products == [] and plain_products >= 1, (products, plain_products)
    saved, saved_plain = (graph_memory(r, "backward")["saved_bytes"] for r in (run, plain))
    assert saved < saved_plain, (saved, saved_plain)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_recomputed_layers_backward_reads_its_probabilities_rebuilt_from_softmax_and_mask(name):
    """In each recomputed layer the backward's reader of the dropped-out attention probabilities
    (the gradient of the product with V) reads them rebuilt from the recomputed softmax and the
    replayed mask, just before it, rather than the replayed dropout's output, which then dies with
    the recomputed product it feeds. Level 1 recomputes 2 of 3 layers."""
    make_model, make_batch, _ = MODELS[name]
    serial = _newest_serial()
    train(make_model(), make_batch, {"memory_opt_level": 1})
    rebuilt = [sum(1 for n in g.gm.graph.nodes
                   if n.target is torch.ops.aten.native_dropout_backward.default
                   and getattr(n.args[0], "target", None) is torch.ops.aten._softmax.default)
               for g in live_graphs() if g.serial > serial and g.stage == "backward" and g.gm is not None]
    # the backward graph, and its variant without the logits' tangent (zero_tangents.py)
    assert rebuilt and all(r == 2 for r in rebuilt), rebuilt
