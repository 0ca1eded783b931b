"""The compiled graphs' fast run path (CompiledGraph._run_fast, Session.run_positional): the same
results as eager, run by the engine, and every input check a user relies on kept: another dtype,
shape or device still raises an error naming the input; a non-contiguous input still runs."""

import pytest
import torch
import torch.nn as nn

from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend.backend import compile_stats
from torch_ort_backend.compiled_graph import live_graphs
from torch_ort_backend.errors import UnsupportedOnnxModelError


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def _nonzero(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(*shape, generator=g) * 1.9 + 0.1
    return t * torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)


def _linear(seed=0):
    torch.manual_seed(seed)
    return nn.Linear(8, 8)


def _graph(stage):
    graphs = [g for g in live_graphs() if g.stage == stage and g.session is not None]
    assert graphs, f"no {stage} graph ran on the engine"
    return graphs[-1]


def test_inference_call_takes_the_fast_path_and_matches_eager():
    model = _linear()
    compiled = torch.compile(model, backend="ort")
    for seed in range(3):
        x = _nonzero(4, 8, seed=seed)
        with torch.no_grad():
            got = compiled(x)
            want = model(x)
        torch.testing.assert_close(got, want)
    graph = _graph("inference")
    assert graph._fast, "the inference graph of a Linear should run on the fast path"
    assert compile_stats().runs == 3
    assert_engine_ran(3)


def test_training_call_takes_the_fast_path_and_matches_eager_gradients():
    """Forward (it returns an input, saved for the backward) and backward (a None gradient for the
    input that does not require one) both on the fast path; outputs and gradients as eager's."""
    eager = _linear()
    model = _linear()
    compiled = torch.compile(model, backend="ort")
    for seed in range(3):
        x = _nonzero(4, 8, seed=seed)
        compiled(x).square().sum().backward()
        eager(x).square().sum().backward()
        torch.testing.assert_close(model.weight.grad, eager.weight.grad)
        torch.testing.assert_close(model.bias.grad, eager.bias.grad)
    assert _graph("forward")._fast and _graph("backward")._fast
    assert compile_stats().runs == 6
    assert_engine_ran(6)


def _compiled_inference_graph():
    model = _linear()
    compiled = torch.compile(model, backend="ort")
    with torch.no_grad():
        compiled(_nonzero(4, 8))
    graph = _graph("inference")
    assert graph._fast
    # AOTAutograd's order: the parameters, then the input.
    return model, graph


@pytest.mark.parametrize("bad, message", [
    (lambda x: x.double(), r"expected dtype float32, got float64"),
    (lambda x: torch.cat([x, x]), r"dimension 0 must be 4"),
])
def test_fast_path_still_rejects_a_changed_dtype_or_shape_naming_the_input(bad, message):
    model, graph = _compiled_inference_graph()
    x = _nonzero(4, 8, seed=1)
    name = graph._input_names[2]
    with pytest.raises(UnsupportedOnnxModelError, match=rf"input '{name}'.*{message}"):
        graph([model.weight.detach(), model.bias.detach(), bad(x)])
    assert graph._fast, "a rejected input must not take the graph off the fast path"
    torch.testing.assert_close(graph([model.weight.detach(), model.bias.detach(), x])[0], model(x).detach())


def test_fast_path_still_rejects_another_device():
    from torch_ort_backend.errors import UnsupportedDeviceError

    model, graph = _compiled_inference_graph()
    with pytest.raises(UnsupportedDeviceError, match="meta"):
        graph([model.weight.detach(), model.bias.detach(), torch.empty(4, 8, device="meta")])


def test_non_contiguous_input_is_copied_and_the_graph_stays_on_the_fast_path():
    """The first non-contiguous argument runs through the checked path (which copies it contiguous);
    after that the fast path copies that argument itself, so the graph stays on it, and a
    contiguous tensor in the same place still runs."""
    model, graph = _compiled_inference_graph()
    runs = compile_stats().runs
    for seed in (2, 3):
        x = _nonzero(8, 4, seed=seed).t()
        assert not x.is_contiguous()
        got = graph([model.weight.detach(), model.bias.detach(), x])[0]
        torch.testing.assert_close(got, model(x).detach())
        assert graph._fast, "a non-contiguous argument must not take the graph off the fast path"
        assert graph._contiguous_copies == (2,)
    x = _nonzero(4, 8, seed=4)
    torch.testing.assert_close(graph([model.weight.detach(), model.bias.detach(), x])[0], model(x).detach())
    assert compile_stats().runs == runs + 3
    assert_engine_ran(4)


def test_a_rejected_input_after_a_copied_one_still_names_the_input():
    model, graph = _compiled_inference_graph()
    graph([model.weight.detach(), model.bias.detach(), _nonzero(8, 4, seed=2).t()])
    assert graph._contiguous_copies == (2,)
    name = graph._input_names[2]
    with pytest.raises(UnsupportedOnnxModelError, match=rf"input '{name}'.*expected dtype float32, got float64"):
        graph([model.weight.detach(), model.bias.detach(), _nonzero(8, 4, seed=3).t().double()])


def test_run_torch_borrows_the_inputs_and_hands_back_tensors_that_own_engine_memory():
    """Session.run_torch (the fast path's engine call): each output is a new torch tensor over the
    engine's buffer, distinct from every input, and it stays valid after the graph, its session
    (asserted gone) and dynamo's caches are gone."""
    import gc
    import weakref

    from torch_ort_backend.compile_state import COMPILE_STATE

    model, graph = _compiled_inference_graph()
    session = weakref.ref(graph.session)
    x = _nonzero(4, 8, seed=5)
    args = [model.weight.detach(), model.bias.detach(), x]
    [out] = graph.session._session.run_torch(list(args))
    want = model(x).detach()
    torch.testing.assert_close(out, want)
    assert type(out) is torch.Tensor and out.is_contiguous() and not out.requires_grad
    assert all(out.data_ptr() != a.data_ptr() for a in args)
    # Two runs hand back two tensors: the first is not overwritten by the second.
    [again] = graph.session._session.run_torch([model.weight.detach(), model.bias.detach(), x * 2])
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(again, model(x * 2).detach())
    del graph, again
    torch._dynamo.reset()
    COMPILE_STATE.clear_sessions()  # identical exports share sessions through this cache
    gc.collect()
    assert session() is None, "the engine session outlived its graph: the test proves nothing"
    torch.testing.assert_close(out, want)
    assert (out.clone().add_(1) - 1 - want).abs().max() < 1e-6


@pytest.mark.parametrize("bad, error, message", [
    (lambda x: _nonzero(8, 4, seed=6).t(), ValueError, r"must be contiguous"),
    (lambda x: torch._neg_view(x), ValueError, r"negative bit"),
    (lambda x: x.numpy(), TypeError, r"expected a torch tensor, got numpy.ndarray"),
    (lambda x: x.double(), Exception, r"expected dtype float32, got float64"),
    (lambda x: x.to_sparse(), ValueError, r"not a dense"),
])
def test_run_torch_refuses_what_it_cannot_borrow_naming_the_input(bad, error, message):
    """What the engine's call cannot take raises naming the input (the fast path then reruns the
    checked path, which copies or raises the backend's error): a non-contiguous tensor, torch's
    lazy negation, a non-tensor, another dtype (the engine's CheckInput), a sparse tensor."""
    model, graph = _compiled_inference_graph()
    name = graph._input_names[2]
    x = _nonzero(4, 8, seed=7)
    with pytest.raises(error, match=rf"input '{name}'.*{message}"):
        graph.session._session.run_torch([model.weight.detach(), model.bias.detach(), bad(x)])
    # and through the compiled graph: the checked path's answer (a neg view is read as its values)
    if message == r"negative bit":
        torch.testing.assert_close(graph([model.weight.detach(), model.bias.detach(), bad(x)])[0],
                                   model(-x).detach())


def test_run_torch_sets_donated_inputs_to_none_once_the_engine_holds_them():
    model, graph = _compiled_inference_graph()
    x = _nonzero(4, 8, seed=8)
    args = [model.weight.detach(), model.bias.detach(), x.clone()]
    [out] = graph.session._session.run_torch(args, [False, False, True])
    assert args[2] is None and args[0] is not None and args[1] is not None
    torch.testing.assert_close(out, model(x).detach())
    with pytest.raises(ValueError, match="2 donation flags for 3 inputs"):
        graph.session._session.run_torch([model.weight.detach(), model.bias.detach(), x], [True, False])


def test_the_dlpack_exchange_of_an_engine_without_run_torch_gives_the_same_results(monkeypatch):
    """The fast path of an engine built without torch (and the benchmark's ort_dlpack runner):
    DLPack capsules to Session.run_positional and back; forward and gradients as eager's."""
    eager = _linear(seed=4)
    model = _linear(seed=4)
    compiled = torch.compile(model, backend="ort")
    x = _nonzero(4, 8, seed=9)
    compiled(x).square().sum().backward()
    for stage in ("forward", "backward"):
        _graph(stage)._torch_exchange = False

    def no_run_torch(*args, **kwargs):
        raise AssertionError("run_torch called on the DLPack path")

    # Every graph's engine call must be run_positional now: run_torch fails the test.
    monkeypatch.setattr(type(_graph("forward").session._session), "run_torch", no_run_torch)
    model.zero_grad()
    runs = compile_stats().runs
    for seed in range(3):
        x = _nonzero(4, 8, seed=10 + seed)
        got = compiled(x)
        want = eager(x)
        torch.testing.assert_close(got, want)
        got.square().sum().backward()
        want.square().sum().backward()
        torch.testing.assert_close(model.weight.grad, eager.weight.grad)
        torch.testing.assert_close(model.bias.grad, eager.bias.grad)
    assert _graph("forward")._fast and not _graph("forward")._torch_exchange
    assert compile_stats().runs == runs + 6
    assert_engine_ran(6)


def test_two_threads_calling_one_compiled_model_get_eager_results_and_gradients():
    """One compiled model called from two threads at once (the engine call releases the GIL):
    every output and gradient as eager's, every run counted."""
    import threading

    eager = _linear(seed=3)
    model = _linear(seed=3)
    compiled = torch.compile(model, backend="ort")
    params = list(model.parameters())
    x0 = _nonzero(4, 8, seed=0)
    with torch.no_grad():
        compiled(x0)
    torch.autograd.grad(compiled(x0).square().sum(), params)  # compiled before the threads start
    runs = compile_stats().runs
    calls, errors = 40, []

    def work(tid):
        try:
            for i in range(calls):
                x = _nonzero(4, 8, seed=100 * tid + i)
                with torch.no_grad():
                    torch.testing.assert_close(compiled(x), eager(x))
                got = torch.autograd.grad(compiled(x).square().sum(), params)
                want = torch.autograd.grad(eager(x).square().sum(), list(eager.parameters()))
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _graph("inference")._fast and _graph("forward")._fast and _graph("backward")._fast
    # per call: the inference graph, or the forward and the backward graph
    assert compile_stats().runs == runs + 2 * calls * 3
    assert_engine_ran(2 * calls * 3)


def test_outputs_replayed_as_views_take_the_fast_path_and_keep_eager_semantics():
    """A forward that returns views of its results (a transpose of an activation the backward
    reads, a reshaped output): the fast path replays them on the engine's outputs as the checked
    path does, so outputs, aliasing and gradients are eager's."""

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)

        def forward(self, x):
            h = self.a(x).relu()
            t = h.transpose(0, 1)  # a view of an intermediate, returned and used by the backward
            return self.b(t.transpose(0, 1)).view(2, 2, 8), t

    torch.manual_seed(0)
    eager = Model()
    model = Model()
    model.load_state_dict(eager.state_dict())
    compiled = torch.compile(model, backend="ort")
    for seed in range(3):
        x = _nonzero(4, 8, seed=seed)
        got_y, got_t = compiled(x)
        want_y, want_t = eager(x)
        torch.testing.assert_close(got_y, want_y)
        torch.testing.assert_close(got_t, want_t)
        assert got_t.stride() == want_t.stride(), "a replayed view keeps eager's strides"
        (got_y.square().sum() + got_t.sum()).backward()
        (want_y.square().sum() + want_t.sum()).backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    forward = _graph("forward")
    assert any(kind[0] == "view" for kind in forward.exported.output_kinds if not isinstance(kind, str)), \
        "the forward should return a replayed view (the test's premise)"
    assert forward._fast and _graph("backward")._fast
    assert_engine_ran(6)


def test_executor_reinfers_a_shape_that_depends_on_an_input_value():
    """The executor keeps a step's inferred output types while its input shapes are unchanged, but
    not for an op whose output shape comes from the value of an input: a Reshape to a shape fed at
    run time gets a new output shape on every run, the input shapes staying the same."""
    import numpy as np
    from onnx import TensorProto, helper

    from torch_ort_backend.session import InferenceSession

    relu = helper.make_node("Relu", ["x"], ["r"])
    reshape = helper.make_node("Reshape", ["r", "shape"], ["y"])
    graph = helper.make_graph(
        [relu, reshape], "reshape_by_value",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])
    session = InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = _nonzero(4, 8, seed=3).numpy()
    for shape in ([4, 8], [8, 4], [2, 16], [8, 4], [32, 1]):
        (y,) = session.run(None, {"x": x, "shape": np.array(shape, dtype=np.int64)})
        np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(shape))
