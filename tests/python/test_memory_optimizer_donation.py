"""Donated inputs and the arena (docs/memory_optimizer.md, "Donated inputs"): the engine drops a
donated feed after its last reader, so a training step's backward frees each stashed activation
inside its run, as eager frees a saved tensor after its node; at memory_opt_level >= 1 the training
graphs run without an arena. Neither changes a number, and nothing the caller still holds
(parameters, the batch, a graph kept for a second backward) is touched."""

from __future__ import annotations

import copy
import functools
import gc
import warnings
import weakref

import numpy as np
import pytest
import torch
import torch._functorch.config as functorch_config
from onnx import TensorProto, helper

from aten_model_builder import ModelBuilder
from compile_harness import train_side_by_side
from conftest import nonzero
from memory_optimizer_harness import assert_identical, graph_memory, train
from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend._engine import C, InvalidArgumentError
from torch_ort_backend.compiled_graph import live_graphs
from torch_ort_backend.session import InferenceSession
from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2

N = 1 << 16  # floats per row of X


def _chain(x_read_last: bool):
    """X [1, N] -> Relu -> Neg -> Concat(B, B) [2, N] -> Sigmoid, or -> Add(C, X) (X's last reader
    is then the last step, where the run's peak is)."""
    nodes = [helper.make_node("Relu", ["X"], ["A"]), helper.make_node("Neg", ["A"], ["B"]),
             helper.make_node("Concat", ["B", "B"], ["C"], axis=0)]
    nodes.append(helper.make_node("Add", ["C", "X"], ["Y"]) if x_read_last else helper.make_node("Sigmoid", ["C"], ["Y"]))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, N])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, N])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(x: np.ndarray, x_read_last: bool) -> np.ndarray:
    c = np.concatenate([-np.maximum(x, 0)] * 2).astype(np.float64)
    return c + x if x_read_last else 1.0 / (1.0 + np.exp(-c))


@pytest.mark.parametrize("x_read_last", [False, True])
def test_a_donated_feed_counts_until_its_last_reader_and_is_freed_by_the_run(rng, x_read_last):
    session = InferenceSession(_chain(x_read_last))
    data = nonzero(rng, (1, N))
    peaks = {}
    for donate in (False, True, True):  # the second donated run is planned (the arena of the first)
        x = torch.from_numpy(data.copy())
        alive = weakref.ref(x)
        feed = {"X": x}
        del x
        (y,) = session.run(None, feed, donate=["X"] if donate else ())
        np.testing.assert_allclose(y.numpy(), _expected(data, x_read_last), rtol=1e-6, atol=1e-7)
        peaks[donate] = session.last_run_stats()["peak_live_bytes"]
        if donate:
            assert feed == {}, "a donated feed leaves input_feed"
            assert alive() is None, "the engine's reference to the donated feed was the last one; it must be gone"
        else:
            assert alive() is not None and feed["X"].numpy().tobytes() == data.tobytes()
    # Counted while the run holds it: at the peak when X's last reader is there, else not at all.
    assert peaks[True] == peaks[False] + (data.nbytes if x_read_last else 0), peaks


def test_a_donated_feed_the_caller_still_holds_is_left_intact(rng):
    session = InferenceSession(_chain(True))
    data = nonzero(rng, (1, N))
    x = torch.from_numpy(data.copy())
    (y,) = session.run(None, {"X": x}, donate=["X"])
    (y_again,) = session.run(None, {"X": x}, donate=["X"])
    assert x.numpy().tobytes() == data.tobytes(), "donation only drops the engine's reference"
    assert torch.equal(y, y_again)
    np.testing.assert_allclose(y.numpy(), _expected(data, True), rtol=1e-6, atol=1e-7)


def test_a_kernel_made_view_of_a_donated_feed_keeps_it_counted_until_the_view_goes(rng):
    """X [1, N] -> ATen t (a view of X that torch made: a buffer of its own over X's memory) -> V;
    Neg(V) -> B; Concat(B, B) [N, 2] -> C; Y = Add(C, V). X's last reader is the ATen node, but V keeps its
    memory alive to the Add, where the run's peak is: a donated X must count there (it did not: its
    release after the ATen node counted it freed)."""
    data = nonzero(rng, (1, N))
    builder = ModelBuilder()
    x = builder.input("X", torch.from_numpy(data))
    (v,) = builder.aten(torch.ops.aten.t.default, [x])
    (b,) = builder.node("Neg", [v])
    (c,) = builder.node("Concat", [b, b], axis=1)
    builder.nodes.append(helper.make_node("Add", [c, v], ["Y"]))
    session = builder.session({"Y": torch.zeros(N, 2)}, allow_unsafe=True)
    expected = np.concatenate([-data.T] * 2, axis=1).astype(np.float64) + data.T
    peaks = {}
    for donate in (False, True, True):
        x_t = torch.from_numpy(data.copy())
        alive = weakref.ref(x_t)
        feed = {"X": x_t}
        del x_t
        (y,) = session.run(None, feed, donate=["X"] if donate else ())
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6, atol=1e-7)
        peaks[donate] = session.last_run_stats()["peak_live_bytes"]
        if donate:
            assert alive() is None, "once the view is gone, the donated feed's memory goes"
    assert peaks[True] == peaks[False] + data.nbytes, peaks


def test_donating_a_name_that_is_not_fed_is_an_error_naming_it(rng):
    session = InferenceSession(_chain(False))
    with pytest.raises(InvalidArgumentError, match="'Z'"):
        session.run(None, {"X": torch.from_numpy(nonzero(rng, (1, N)))}, donate=["Z"])
    with pytest.raises(ValueError, match="donation flags"):
        session._session.run_positional([torch.from_numpy(nonzero(rng, (1, N))).__dlpack__()], [True, False])


# ---- a training step ----

GPT2 = functools.partial(make_gpt2, hidden=64, layers=4, heads=4, positions=128, dropout=0.1)
BATCH = functools.partial(causal_lm_batch, batch=4, seq=128)


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    gc.collect()
    for g in live_graphs():
        if getattr(g, "memory", None) is not None:
            g.memory.runs = 0
    yield from fresh_state(monkeypatch)


def _train(model, level: int, donate: bool, steps: int = 3):
    # torch's own switch: without it AOTAutograd lists no donated buffers, and nothing is donated.
    with functorch_config.patch(donated_buffer=donate):
        return train(model, BATCH, {"memory_opt_level": level}, steps=steps)


@pytest.mark.parametrize("level", [0, 1])
def test_donation_lowers_the_backward_peak_and_changes_no_number(level):
    model = GPT2()
    kept, donated = _train(model, level, donate=False), _train(model, level, donate=True)
    assert_identical(kept, donated, f"donated stash at memory_opt_level {level}")
    bw_kept, bw_donated = graph_memory(kept, "backward"), graph_memory(donated, "backward")
    assert bw_kept["donated_bytes"] == 0 and bw_kept["saved_bytes"] == bw_donated["saved_bytes"]
    # Most of the stash is donated (the rest aliases a forward input, e.g. a view of a parameter).
    assert bw_donated["donated_bytes"] > 0.8 * bw_donated["saved_bytes"], bw_donated
    assert bw_donated["step_peak_bytes"] == (bw_donated["saved_bytes"] - bw_donated["donated_bytes"]
                                             + bw_donated["peak_live_bytes"])
    # Each activation goes after its last reader: the backward's peak no longer holds the whole
    # stash beside its gradients (measured: 17% of the stash less at level 0, whose peak is early in
    # the backward with most of it still to be read; 76% at level 1).
    assert bw_donated["step_peak_bytes"] < bw_kept["step_peak_bytes"] - 0.1 * bw_kept["saved_bytes"], (
        bw_kept, bw_donated)
    assert donated.memory["step_peak_bytes"] < kept.memory["step_peak_bytes"]


def test_level_1_with_donation_matches_eager_and_leaves_parameters_and_batch_to_the_caller():
    model = GPT2(dropout=0.0)
    compiled_module = copy.deepcopy(model)
    compiled = torch.compile(compiled_module, backend="ort", options={"memory_opt_level": 1})
    batches = {step: BATCH(step) for step in range(3)}
    originals = {step: {k: v.clone() for k, v in b.items()} for step, b in batches.items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_side_by_side(model, compiled, compiled_module, batches.__getitem__, 3,
                           lambda params: torch.optim.SGD(params, lr=0.05), rtol=1e-4, atol=1e-5)
    # Level 1 must have been in force: its plans partitioned (flash attention's outputs saved).
    failed = [str(w.message) for w in caught if "memory optimizer failed" in str(w.message)]
    assert not failed, failed[0][:400]
    assert_engine_ran(6)
    # the backward that ran last: the first step's (AOTAutograd's path, the logits' zero gradient
    # materialised) ran once, without donating; the later steps run its variant without the logits'
    # tangent (zero_tangents.py), which donates from its second run
    backward = max((g.memory for g in live_graphs() if g.stage == "backward" and g.memory.runs), key=lambda m: m.order)
    assert backward.donated_bytes > 0, "the stash must have been donated"
    for step, batch in batches.items():  # user inputs are never donated
        for key, value in batch.items():
            assert torch.equal(value, originals[step][key]), f"batch {step}'s {key} changed"


def test_a_graph_kept_for_a_second_backward_donates_nothing():
    """retain_graph=True: AOTAutograd lists no donated buffers (the saved tensors are needed again),
    and the second backward sees every stashed activation intact."""
    model = GPT2(dropout=0.0)
    reference = copy.deepcopy(model)
    ref_loss = reference(**BATCH(0))["loss"]
    ref_loss.backward()
    compiled = torch.compile(model, backend="ort", options={"memory_opt_level": 1})
    loss = compiled(**BATCH(0))["loss"]
    loss.backward(retain_graph=True)
    loss.backward()
    assert_engine_ran(3)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, 2 * q.grad, rtol=1e-4, atol=1e-5, msg=f"gradient of {name}")
    backward = [g.memory for g in live_graphs() if g.stage == "backward" and g.memory.runs]
    assert backward and all(m.donated_bytes == 0 for m in backward)


@pytest.mark.parametrize("level", [0, 1])
def test_level_0_keeps_an_arena_between_steps_and_level_1_takes_none(level):
    """Level 0 plans an arena and keeps the largest between steps (no page faults); level 1's
    training graphs run without one (each intermediate freed after its last reader), so they leave
    no engine arena resident between steps, and the pool holds what it held before."""
    held_before = C.arena_pool_free_bytes()  # arenas that sessions of earlier tests keep
    # steps 2 and 3 run the backward without the logits' tangent (zero_tangents.py)
    run = _train(GPT2(), level, donate=True, steps=3)
    assert graph_memory(run, "backward")["runs"] == 2
    graphs = [g for g in live_graphs() if g.memory.runs]
    assert {g.stage for g in graphs} == {"forward", "backward"}
    if level == 0:
        assert C.arena_pool_free_bytes() > 0
    else:
        assert all(g.session.last_run_stats()["arena_bytes"] == 0 for g in graphs)
        assert C.arena_pool_free_bytes() == held_before


def test_a_run_that_fails_after_donating_raises_instead_of_rerunning_without_its_inputs():
    """The donated activations are gone once handed over: a failure then is an error naming the
    graph, never an eager rerun (or the checked path) reading inputs that are no longer there."""
    from torch_ort_backend import compile_stats
    from torch_ort_backend.errors import UnsupportedOnnxModelError

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    compiled = torch.compile(model, backend="ort")
    x = torch.randn(8, 16)
    compiled(x).square().sum().backward()  # the first run donates nothing
    [backward] = [g for g in live_graphs() if g.stage == "backward" and g.memory.runs]
    assert backward.memory.donated_inputs, "tanh's output is a donated buffer"

    class _Failing:
        def run_torch(self, args, donated):
            assert any(donated)
            for i, flag in enumerate(donated):  # as the engine's binding does before it runs
                if flag:
                    args[i] = None
            raise RuntimeError("injected failure")

        def run(self, *args):
            raise RuntimeError("injected failure")

    backward.session._session = _Failing()
    with pytest.raises((UnsupportedOnnxModelError, RuntimeError), match=f"{backward.name}.*injected failure"):
        compiled(x).square().sum().backward()
    assert compile_stats().fallbacks == 0
