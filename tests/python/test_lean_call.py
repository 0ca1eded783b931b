"""The lean per-call path (torch_ort_backend/lean_call.py): a region "ort" compiled skips AOTAutograd's
runtime wrappers where its metadata shows nothing for them to do. Each test checks it against eager
PyTorch (outputs and gradients) and against AOTAutograd's own path (option lean_call=False): the
same results, the same counters and memory_stats(), the same errors; and that the engine ran it.
Regions the lean path must not take (input mutations, the profiler on) keep AOTAutograd's path."""


import pytest
import torch
import torch.nn as nn

from ortmodule_helpers import OwnRegions, assert_engine_ran, fresh_state
from torch_ort_backend import memory_stats
from torch_ort_backend.backend import compile_stats


_OWN: list = []  # the running test's OwnRegions


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    for _ in fresh_state(monkeypatch):
        _OWN[:] = [OwnRegions()]  # graphs and regions of earlier tests (reference cycles) collected
        yield


def _own_regions() -> list:
    """The regions this test compiled (ortmodule_helpers.OwnRegions)."""
    return _OWN[0]()


def _nonzero(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(*shape, generator=g) * 1.9 + 0.1
    return t * torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)


class TwoOutputs(nn.Module):
    """Two Linears; returns a differentiable output and a non-differentiable one (an argmax), so
    the lean training path marks one output non-differentiable and saves activations."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        y = self.fc2(torch.tanh(self.fc1(x)))
        return y, y.argmax(dim=-1)


def _region():
    regions = _own_regions()
    assert len(regions) == 1, f"expected one compiled region, found {len(regions)}"
    return regions[0]


def test_inference_calls_take_the_lean_path_and_match_eager():
    model = TwoOutputs()
    compiled = torch.compile(model, backend="ort")
    for seed in range(4):
        x = _nonzero(5, 8, seed=seed)
        with torch.no_grad():
            got, got_idx = compiled(x)
            want, want_idx = model(x)
        torch.testing.assert_close(got, want)
        assert torch.equal(got_idx, want_idx)
        assert not got.requires_grad
    region = _region()
    assert region.inference and region.declined is None
    assert region.lean_calls == 3, "every call after the first (AOTAutograd's) should be lean"
    assert compile_stats().runs == 4
    assert_engine_ran(4)


def test_training_calls_take_the_lean_path_and_match_eager_gradients():
    eager = TwoOutputs()
    model = TwoOutputs()
    compiled = torch.compile(model, backend="ort")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1)
    for seed in range(4):
        x = _nonzero(5, 8, seed=seed)
        got, got_idx = compiled(x)
        want, want_idx = eager(x)
        torch.testing.assert_close(got, want)
        assert torch.equal(got_idx, want_idx)
        assert not got_idx.requires_grad
        (got.square() * x[:, :4]).sum().backward()
        (want.square() * x[:, :4]).sum().backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
        opt_c.step()
        opt_e.step()
        opt_c.zero_grad()
        opt_e.zero_grad()
    region = _region()
    # the first call runs AOTAutograd's path (and its backward compiles the backward graph)
    assert region.declined is None and region.lean_calls == 3
    assert "LeanFunction" in type(got.grad_fn).__name__
    assert_engine_ran(8)  # a forward and a backward graph per step


def test_gradient_of_an_input_matches_eager():
    """An input that requires grad gets its gradient through the lean autograd.Function."""
    model = TwoOutputs()
    compiled = torch.compile(model, backend="ort")
    for seed in range(3):
        x = _nonzero(5, 8, seed=seed).requires_grad_()
        xe = x.detach().clone().requires_grad_()
        compiled(x)[0].sum().backward()
        model(xe)[0].sum().backward()
        torch.testing.assert_close(x.grad, xe.grad)
    assert _region().lean_calls >= 1
    assert_engine_ran(6)


@pytest.mark.parametrize("how", ["option", "environment"])
def test_lean_call_off_keeps_aotautograds_path(how, monkeypatch):
    options = None
    if how == "option":
        options = {"lean_call": False}
    else:
        monkeypatch.setenv("ORTMODULE_LEAN_CALL", "0")
    model = TwoOutputs()
    compiled = torch.compile(model, backend="ort", options=options)
    for seed in range(3):
        x = _nonzero(5, 8, seed=seed)
        compiled(x)[0].sum().backward()
        with torch.no_grad():
            torch.testing.assert_close(compiled(x)[0], model(x)[0])
    assert _own_regions() == [], "no lean region may exist with lean_call off"
    assert_engine_ran(9)


def _train_steps(compiled, model, steps, seed0=0):
    for seed in range(seed0, seed0 + steps):
        x = _nonzero(5, 8, seed=seed)
        compiled(x)[0].sum().backward()
        model.zero_grad()


def test_counters_and_memory_stats_are_those_of_aotautograds_path():
    """Two copies of one model, one on each path, interleaved: they share their engine sessions
    (identical exports), and each graph's run count and memory figures are still its own and equal
    the other path's."""
    # memory_stats() reports every compiled graph still alive in the process: earlier tests' too.
    before = set(memory_stats()["graphs"])
    lean_model, aot_model = TwoOutputs(), TwoOutputs()
    lean = torch.compile(lean_model, backend="ort")
    aot = torch.compile(aot_model, backend="ort", options={"lean_call": False})
    for step in range(3):
        _train_steps(lean, lean_model, 1, seed0=step)
        _train_steps(aot, aot_model, 1, seed0=step)
    assert _region().lean_calls == 2
    stats = {name: s for name, s in memory_stats()["graphs"].items() if name not in before}
    assert len(stats) == 4, stats  # a forward and a backward graph per copy
    by_stage: dict = {}
    for name, s in stats.items():
        by_stage.setdefault(s["stage"], []).append(s)
    for stage, (a, b) in by_stage.items():
        assert a == b, f"{stage}: {a} != {b}"
        assert a["runs"] == 3 and a["peak_live_bytes"] > 0
    assert compile_stats().runs == 12
    assert compile_stats().session_cache_hits >= 2, "the copies were meant to share their sessions"


def test_memory_figures_of_a_shared_session_stay_each_graphs_own():
    """memory_stats() reads a graph's peaks from its session when asked (step_memory.py). Two
    graphs on one session (identical exports share it): the one that ran first keeps the figures of
    its own last run after the other ran the session on a larger batch."""
    from onnx import TensorProto, helper

    from torch_ort_backend.memory_optimizer.step_memory import GraphMemory
    from torch_ort_backend.session import InferenceSession

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "x"], ["m"]),
             helper.make_node("Add", ["m", "r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])])
    session = InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    first, second = GraphMemory("inference"), GraphMemory("inference")

    def run(memory, rows):
        memory.claim(session)
        x = _nonzero(rows, 8, seed=rows)
        (y,) = session.run(None, {"x": x})
        torch.testing.assert_close(y, x.relu() * x + x.relu())
        memory.record(session, [x])
        stats = session.last_run_stats()
        return int(stats["peak_bytes"]), int(stats["peak_live_bytes"])

    small = run(first, 2)
    assert (first.peak_bytes, first.peak_live_bytes) == small
    large = run(second, 256)
    assert large[1] > small[1]
    assert (first.peak_bytes, first.peak_live_bytes) == small
    assert (second.peak_bytes, second.peak_live_bytes) == large
    assert first.as_dict()["peak_live_bytes"] == small[1] and first.runs == second.runs == 1
    again = run(first, 16)
    assert (first.peak_bytes, first.peak_live_bytes) == again
    assert (second.peak_bytes, second.peak_live_bytes) == large


def test_double_backward_is_refused_as_on_aotautograds_path():
    for options in (None, {"lean_call": False}):
        torch._dynamo.reset()
        model = TwoOutputs()
        compiled = torch.compile(model, backend="ort", options=options)
        _train_steps(compiled, model, 1)
        x = _nonzero(5, 8, seed=3).requires_grad_()
        (gx,) = torch.autograd.grad(compiled(x)[0].square().sum(), x, create_graph=True)
        with pytest.raises(RuntimeError, match="does not currently support double backward"):
            gx.sum().backward()
    assert_engine_ran()


def test_retain_graph_behaves_as_on_aotautograds_path():
    """A second backward through the same graph: whatever AOTAutograd's path does (the gradients,
    or its donated-buffer error), the lean path does too."""
    results = []
    for options in (None, {"lean_call": False}):
        torch._dynamo.reset()
        model = TwoOutputs()
        compiled = torch.compile(model, backend="ort", options=options)
        _train_steps(compiled, model, 1)
        loss = compiled(_nonzero(5, 8, seed=4))[0].square().sum()
        try:
            loss.backward(retain_graph=True)
            loss.backward()
            results.append(("ok", [p.grad.clone() for p in model.parameters()]))
        except RuntimeError as e:
            results.append(("error", str(e).split(".")[0]))
    (kind_lean, lean), (kind_aot, aot) = results
    assert kind_lean == kind_aot, results
    if kind_lean == "ok":
        for g, h in zip(lean, aot):
            torch.testing.assert_close(g, h)
    else:
        assert lean == aot


class Counting(nn.Module):
    """A buffer updated in place by every call: an input mutation AOTAutograd writes back."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(8, 8)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return self.fc(x) * self.calls


def test_a_region_that_mutates_its_inputs_keeps_aotautograds_path():
    model, eager = Counting(), Counting()
    compiled = torch.compile(model, backend="ort")
    for seed in range(3):
        x = _nonzero(5, 8, seed=seed)
        compiled(x).sum().backward()
        eager(x).sum().backward()
        assert model.calls.item() == eager.calls.item() == seed + 1
        torch.testing.assert_close(model.fc.weight.grad, eager.fc.weight.grad)
    regions = _own_regions()
    assert all(r.lean_calls == 0 for r in regions)
    assert all(r.declined == "input mutations" for r in regions if r.declined), [r.declined for r in regions]
    assert_engine_ran()


def test_under_the_profiler_calls_take_aotautograds_path():
    model = TwoOutputs()
    compiled = torch.compile(model, backend="ort")
    x = _nonzero(5, 8)
    with torch.no_grad():
        compiled(x)
        compiled(x)
        lean_calls = _region().lean_calls
        assert lean_calls == 1
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            got = compiled(x)[0]
        torch.testing.assert_close(got, model(x)[0])
        assert _region().lean_calls == lean_calls
        compiled(x)
        assert _region().lean_calls == lean_calls + 1
    assert_engine_ran(4)


def test_under_autocast_matches_aotautograds_path():
    """A region traced under autocast: the graph runs with autocast off, as AOTAutograd runs it."""
    outs = []
    for options in (None, {"lean_call": False}):
        torch._dynamo.reset()
        model = TwoOutputs()
        compiled = torch.compile(model, backend="ort", options=options)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for seed in range(3):
                y = compiled(_nonzero(5, 8, seed=seed))[0]
                y.float().sum().backward()
        outs.append((y.detach(), [p.grad.clone() for p in model.parameters()]))
        if options is None:
            assert _region().lean_calls == 2 and _region().disable_amp
    (y_lean, g_lean), (y_aot, g_aot) = outs
    assert y_lean.dtype == torch.bfloat16
    torch.testing.assert_close(y_lean, y_aot, rtol=0, atol=0)
    for g, h in zip(g_lean, g_aot):
        torch.testing.assert_close(g, h, rtol=0, atol=0)
    assert_engine_ran()


def test_bad_lean_call_values_are_named():
    """A lean_call option or ORTMODULE_LEAN_CALL that is not a boolean is refused, naming it."""
    from torch_ort_backend.options import resolve

    with pytest.raises(ValueError, match="ORTMODULE_LEAN_CALL must be a boolean"):
        resolve(None, environ={"ORTMODULE_LEAN_CALL": "sometimes"})
    with pytest.raises(ValueError, match="option 'lean_call' must be a boolean"):
        resolve({"lean_call": "sometimes"}, environ={})
