"""The per-call savings of issue 15 (docs/performance.md, "Per-call overhead"), each against a
reference: Session.torch_runner() (run_torch as one C call) against eager PyTorch and numpy, with
run_torch's error messages; small graphs run with the GIL kept while another thread runs the same
session with it released; a value fetched twice and fetches moved out of their slots; the counters
that _run_fast keeps inline (compile_stats().runs, GraphMemory.runs / order, memory_stats())."""

import gc
import threading

import numpy as np
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper as h

from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend import memory_stats
from torch_ort_backend.backend import compile_stats
from torch_ort_backend.compiled_graph import live_graphs
from torch_ort_backend.session import InferenceSession

vi = h.make_tensor_value_info


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def _nonzero(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(*shape, generator=g) * 1.9 + 0.1
    return t * torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)


def _gemm() -> InferenceSession:
    """Y = X W^T + B: the one-node graph of a Linear."""
    g = h.make_graph([h.make_node("Gemm", ["X", "W", "B"], ["Y"], transB=1)], "g",
                     [vi("W", TP.FLOAT, [8, 8]), vi("B", TP.FLOAT, [8]), vi("X", TP.FLOAT, [4, 8])],
                     [vi("Y", TP.FLOAT, [4, 8])])
    return InferenceSession(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))


def _gemm_args(seed):
    return [_nonzero(8, 8, seed=seed), _nonzero(8, seed=seed + 1), _nonzero(4, 8, seed=seed + 2)]


def _float64_gemm(w, b, x):
    return x.double().numpy() @ w.double().numpy().T + b.double().numpy()


def test_torch_runner_matches_float64_and_run_torch():
    s = _gemm()
    runner = s._session.torch_runner()
    for seed in range(3):
        w, b, x = _gemm_args(seed)
        [got] = runner([w, b, x])
        [via_run_torch] = s._session.run_torch([w, b, x])
        np.testing.assert_allclose(got.numpy(), _float64_gemm(w, b, x), rtol=1e-5, atol=1e-5)
        assert torch.equal(got, via_run_torch)
        assert got.data_ptr() != via_run_torch.data_ptr(), "each run hands back new memory"


def test_torch_runner_raises_run_torchs_errors_naming_the_input():
    runner = _gemm()._session.torch_runner()
    w, b, x = _gemm_args(0)
    with pytest.raises(Exception, match=r"input 'X'.*float32.*float64|input 'X'.*float64"):
        runner([w, b, x.double()])
    with pytest.raises(Exception, match=r"input 'X'"):
        runner([w, b, _nonzero(5, 8)])
    with pytest.raises(ValueError, match=r"input 'X'.*contiguous"):
        runner([w, b, _nonzero(8, 4).t()])
    with pytest.raises(TypeError, match=r"input 'B'.*expected a torch tensor"):
        runner([w, 3.0, x])
    with pytest.raises(ValueError, match="got 2 inputs; the model takes 3"):
        runner([w, b])
    with pytest.raises(TypeError, match="list of tensors"):
        runner((w, b, x))
    [y] = runner([w, b, x])  # the runner still works after its errors
    np.testing.assert_allclose(y.numpy(), _float64_gemm(w, b, x), rtol=1e-5, atol=1e-5)


def test_torch_runner_keeps_its_session_alive():
    s = _gemm()
    runner = s._session.torch_runner()
    del s
    gc.collect()
    w, b, x = _gemm_args(5)
    [y] = runner([w, b, x])
    np.testing.assert_allclose(y.numpy(), _float64_gemm(w, b, x), rtol=1e-5, atol=1e-5)


def test_small_run_keeping_the_gil_beside_a_run_that_releases_it():
    """One thread runs the small graph through the runner (which keeps the GIL when no other run of
    the session is in progress), another runs the same session through the named path (GIL
    released, numpy feeds whose deleters take the GIL): no deadlock, every result as float64's."""
    s = _gemm()
    runner = s._session.torch_runner()
    errors: list = []

    def by_runner(seed):
        try:
            for i in range(300):
                w, b, x = _gemm_args(seed + i % 5)
                [y] = runner([w, b, x])
                np.testing.assert_allclose(y.numpy(), _float64_gemm(w, b, x), rtol=1e-5, atol=1e-5)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def by_name(seed):
        try:
            for i in range(300):
                w, b, x = (t.numpy() for t in _gemm_args(seed + i % 5))
                [y] = s.run(None, {"W": w, "B": b, "X": x})
                np.testing.assert_allclose(y, x.astype(np.float64) @ w.astype(np.float64).T + b, rtol=1e-5, atol=1e-5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=by_runner, args=(10,)), threading.Thread(target=by_name, args=(20,)),
               threading.Thread(target=by_runner, args=(30,))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a run deadlocked"
    assert not errors, errors


def test_a_value_fetched_twice_and_an_output_that_is_a_feed():
    """Fetched values move out of their slots: a value named as two outputs (of the model, or
    fetched twice by name) still comes back as both, equal to float64's sum; an output that is a feed
    is a copy of it."""
    add = [h.make_node("Add", ["x", "y"], ["s"])]
    ins = [vi("x", TP.FLOAT, [5]), vi("y", TP.FLOAT, [5])]
    g = h.make_graph(add, "g", ins, [vi("s", TP.FLOAT, [5]), vi("s", TP.FLOAT, [5]), vi("x", TP.FLOAT, [5])])
    s = InferenceSession(h.make_model(g, opset_imports=[h.make_opsetid("", 21)]))
    x, y = _nonzero(5, seed=1), _nonzero(5, seed=2)
    want = x.double().numpy() + y.double().numpy()
    for run in (lambda: s._session.run_torch([x, y]), lambda: s._session.torch_runner()([x, y])):
        first, second, out_x = run()
        np.testing.assert_allclose(first.numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(second.numpy(), want, rtol=1e-6)
        assert torch.equal(out_x, x)
        assert out_x.data_ptr() != x.data_ptr(), "an output that is a feed is a copy"
    one = h.make_graph(add, "g", ins, [vi("s", TP.FLOAT, [5])])
    s1 = InferenceSession(h.make_model(one, opset_imports=[h.make_opsetid("", 21)]))
    a, b = s1.run(["s", "s"], {"x": x.numpy(), "y": y.numpy()})
    np.testing.assert_allclose(a, want, rtol=1e-6)
    np.testing.assert_allclose(b, want, rtol=1e-6)


def test_counters_of_the_fast_path_are_kept_on_every_call():
    """compile_stats().runs, each graph's GraphMemory.runs and order, and memory_stats() after
    inference and training calls on the fast path (the runner): a lost increment fails here."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    eager = torch.nn.Linear(8, 8)
    eager.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="ort")
    old = {id(g) for g in live_graphs()}  # earlier tests' graphs still alive
    with torch.no_grad():
        for seed in range(4):
            x = _nonzero(4, 8, seed=seed)
            torch.testing.assert_close(compiled(x), eager(x))
    [inference] = [g for g in live_graphs() if g.stage == "inference" and id(g) not in old]
    assert inference._fast and inference._runner is not None
    assert compile_stats().runs == 4
    assert inference.memory.runs == 4
    first_order = inference.memory.order
    for seed in range(3):
        x = _nonzero(4, 8, seed=10 + seed)
        got = compiled(x)
        want = eager(x)
        torch.testing.assert_close(got, want)
        got.square().sum().backward()
        want.square().sum().backward()
    torch.testing.assert_close(model.weight.grad, eager.weight.grad)
    torch.testing.assert_close(model.bias.grad, eager.bias.grad)
    forward = [g for g in live_graphs() if g.stage == "forward" and id(g) not in old][-1]
    backward = [g for g in live_graphs() if g.stage == "backward" and g.session is not None and id(g) not in old][-1]
    assert compile_stats().runs == 4 + 6
    assert forward.memory.runs == 3 and backward.memory.runs == 3
    assert backward.memory.order > forward.memory.order > first_order
    stats = memory_stats()
    assert stats["forward_peak_bytes"] >= 0 and stats["backward_peak_bytes"] >= 0
    assert_engine_ran(10)


def test_lean_run_counts_every_call_from_two_threads():
    """lean_call.py's regions run their graphs through CompiledGraph.lean_run (run_list's common
    case as one closure). N inference calls in one thread beside M training calls in another, on one
    compiled model: every output and gradient against eager, and the counters exact (compile_stats().runs,
    each graph's GraphMemory.runs, the regions' lean calls): a lost or doubled increment fails here."""
    from torch_ort_backend.lean_call import live_regions

    torch.manual_seed(0)
    gc.collect()
    old = {id(g) for g in live_graphs()} | {id(r) for r in live_regions()}  # earlier tests' still alive
    model = torch.nn.Linear(8, 8)
    eager = torch.nn.Linear(8, 8)
    eager.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="ort")
    for _ in range(2):  # both modes compiled, their lean paths built (the first call is AOTAutograd's)
        with torch.no_grad():
            compiled(_nonzero(4, 8, seed=1))
        compiled(_nonzero(4, 8, seed=2)).sum().backward()
    model.weight.grad = model.bias.grad = None
    graphs = [g for g in live_graphs() if id(g) not in old]
    [inference] = [g for g in graphs if g.stage == "inference"]
    [forward] = [g for g in graphs if g.stage == "forward"]
    [backward] = [g for g in graphs if g.stage == "backward" and g.session is not None]
    assert inference.lean_run != inference.run_list  # the closure, not run_list
    regions = {r.inference: r for r in live_regions() if id(r) not in old}
    assert len(regions) == 2
    assert regions[True].lean[0] is not None and regions[False].lean[0] is not None
    runs0, lean0 = compile_stats().runs, {k: r.lean_calls for k, r in regions.items()}
    mem0 = {g.stage: g.memory.runs for g in (inference, forward, backward)}
    order0 = max(g.memory.order for g in (inference, forward, backward))
    n, m = 300, 120
    xs = [_nonzero(4, 8, seed=100 + i) for i in range(max(n, m))]
    errors: list = []
    grads: list = []

    def infer():
        try:
            with torch.no_grad():
                for i in range(n):
                    torch.testing.assert_close(compiled(xs[i]), eager(xs[i]))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def train():
        try:
            for i in range(m):
                compiled(xs[i]).sum().backward()
                grads.append(xs[i])
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=infer), threading.Thread(target=train)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    for x in grads:
        eager(x).sum().backward()
    torch.testing.assert_close(model.weight.grad, eager.weight.grad)
    torch.testing.assert_close(model.bias.grad, eager.bias.grad)
    assert compile_stats().runs - runs0 == n + 2 * m
    assert inference.memory.runs - mem0["inference"] == n
    assert forward.memory.runs - mem0["forward"] == m
    assert backward.memory.runs - mem0["backward"] == m
    assert regions[True].lean_calls - lean0[True] == n
    assert regions[False].lean_calls - lean0[False] == m
    orders = sorted(g.memory.order for g in (inference, forward, backward))
    assert orders[0] > order0 and len(set(orders)) == 3  # each run took its own order number
    assert_engine_ran(n + 2 * m)


def test_lean_run_refused_call_reruns_checked_and_is_remade():
    """A call lean_run's runner refuses (a non-contiguous argument, as an autocast backward's
    transposed activations come) reruns the checked path, counted once; the graph then copies that
    argument contiguous on the fast path, and lean_run is run_list again (the closure only covers
    graphs with nothing to copy). The graph is called as lean_call.py calls it (a region's
    non-contiguous input would be a new TorchDynamo graph). Outputs against eager throughout."""
    torch.manual_seed(0)
    gc.collect()
    old = {id(g) for g in live_graphs()}  # earlier tests' graphs still alive
    model = torch.nn.Linear(8, 8)
    eager = torch.nn.Linear(8, 8)
    eager.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="ort")
    with torch.no_grad():
        for seed in range(3):
            x = _nonzero(4, 8, seed=seed)
            torch.testing.assert_close(compiled(x), eager(x))
        [graph] = [g for g in live_graphs() if g.stage == "inference" and id(g) not in old]
        assert graph.lean_run != graph.run_list
        by_shape = {(8, 8): model.weight, (8,): model.bias}
        shapes = [tuple(n.meta["val"].shape) for n in graph.gm.graph.nodes if n.op == "placeholder"]
        x_at = shapes.index((4, 8))

        def args_for(x):
            return [x if i == x_at else by_shape[s] for i, s in enumerate(shapes)]

        runs = compile_stats().runs
        assert graph.memory.runs == runs == 3
        x = _nonzero(8, 4, seed=7).t()
        assert not x.is_contiguous()
        [out] = graph.lean_run(args_for(x))
        torch.testing.assert_close(out, eager(x))
        assert compile_stats().runs == graph.memory.runs == runs + 1  # refused, then run checked: once
        assert graph._contiguous_copies == (x_at,) and graph._fast
        assert graph.lean_run == graph.run_list
        for seed in range(3):
            x = _nonzero(8, 4, seed=20 + seed).t()
            [out] = graph.lean_run(args_for(x))
            torch.testing.assert_close(out, eager(x))
        x = _nonzero(4, 8, seed=30)
        torch.testing.assert_close(compiled(x), eager(x))  # the region again, through run_list
        assert compile_stats().runs == graph.memory.runs == runs + 5
    assert_engine_ran(runs + 5)


def test_lean_run_logs_each_run_at_debug_level(caplog):
    """The debug log of each run (the graph's last_run_stats) is kept on lean_run's path: its check
    reads logging's cache, which a level change clears."""
    import logging

    gc.collect()
    old = {id(g) for g in live_graphs()}  # earlier tests' graphs still alive
    model = torch.nn.Linear(8, 8)
    compiled = torch.compile(model, backend="ort")
    with torch.no_grad():
        for seed in range(3):
            x = _nonzero(4, 8, seed=seed)
            torch.testing.assert_close(compiled(x), model(x))
        [graph] = [g for g in live_graphs() if g.stage == "inference" and id(g) not in old]
        assert graph.lean_run != graph.run_list
        caplog.set_level(logging.DEBUG, logger="torch_ort_backend")
        compiled(_nonzero(4, 8, seed=5))
        assert [r for r in caplog.records if r.getMessage().startswith(f"{graph.name} run: ")]
        caplog.clear()
        caplog.set_level(logging.INFO, logger="torch_ort_backend")
        compiled(_nonzero(4, 8, seed=6))
        assert not [r for r in caplog.records if " run: " in r.getMessage()]
