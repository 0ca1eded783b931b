"""torch.autograd.Functions inside graphs compiled by "ort" run as PythonOp / PythonOpGrad nodes:
outputs and gradients equal eager PyTorch's (rtol 1e-4, atol 1e-5, random non-zero inputs) for a
custom GeLU, a numpy GeLU, multiple outputs with non-differentiable ones, constant arguments of
every kind in every position, objects passed by reference, an in-place Function (mark_dirty),
set_materialize_grads and needs_input_grad, two same-named Functions of different modules, eval
mode and no_grad, ORTModule; a Function TorchDynamo cannot trace still compiles into one graph
(where backend="aot_eager" breaks the graph); no forward context outlives its step."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

import python_op_functions as fns
import python_op_functions_twin as twin
from python_op_harness import (
    assert_engine_ran_since,
    check_against_eager,
    engine_counters,
    compile_ort,
    current_graphs,
    graph_count,
    python_op_nodes,
    random_input,
)
from torch_ort_backend.autograd_function import live_contexts, qualified_name


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")


def name(cls) -> str:
    return qualified_name(cls)


class GeluMlp(nn.Module):
    def __init__(self, act):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2, self.act = nn.Linear(8, 16), nn.Linear(16, 4), act

    def forward(self, x):
        return self.fc2(self.act.apply(self.fc1(x)))


@pytest.mark.parametrize("act", [fns.CustomGelu, fns.NumpyErfGelu], ids=["custom_gelu", "numpy_gelu"])
def test_gelu_mlp_trains_like_eager(act):
    model = GeluMlp(act)
    compiled = compile_ort(model)
    for step in range(3):
        check_against_eager(model, compiled, [random_input((5, 8), seed=step)], list(model.parameters()))
    nodes = python_op_nodes()
    assert nodes[("PythonOp", name(act))] == 1 and nodes[("PythonOpGrad", name(act))] == 1, nodes
    assert graph_count() == 1


@pytest.mark.parametrize("act", [fns.NumpyErfGelu, fns.DataDependentNormalize], ids=["numpy", "data_dependent"])
def test_untraceable_function_is_one_graph_where_aot_eager_breaks(act):
    def fn(x, w):
        h = act.apply(x @ w)
        return (h * h).sum(dim=-1)

    x, w = random_input((4, 6), seed=1), random_input((6, 5), requires_grad=True, seed=2)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.compile(fn, backend="aot_eager")(x, w)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2  # TorchDynamo breaks the graph
    explained = torch._dynamo.explain(fn)(x, w)
    assert explained.graph_break_count >= 1
    compiled = compile_ort(fn)
    check_against_eager(fn, compiled, [x, w])
    assert graph_count() == 1
    assert not torch._dynamo.utils.counters["graph_break"]
    assert python_op_nodes()[("PythonOp", name(act))] == 1


@pytest.mark.parametrize("act", [fns.CustomGelu, fns.NumpyErfGelu], ids=["fake_tensors", "real_run"])
def test_dynamic_shapes_compile_once(act):
    # The numpy forward cannot run on fake tensors: its output shapes come from one real run, mapped
    # back onto the symbolic batch size.
    def fn(x, w):
        return act.apply(x @ w) * 2

    w = random_input((4, 6), requires_grad=True, seed=15)
    compiled = compile_ort(fn, dynamic=True)
    for batch in (3, 5, 8):
        check_against_eager(fn, compiled, [random_input((batch, 4), seed=batch), w])
    assert graph_count() == 1


def test_outputs_marked_non_differentiable():
    def fn(x):
        values, index, mask = fns.TopValueAndIndex.apply(x * 1.5)
        return values * 2, index, mask

    x = random_input((3, 7), requires_grad=True, seed=3)
    out = check_against_eager(fn, compile_ort(fn), [x])
    assert out[1].dtype == torch.int64 and not out[1].requires_grad and not out[2].requires_grad
    assert python_op_nodes()[("PythonOpGrad", name(fns.TopValueAndIndex))] == 1


@pytest.mark.parametrize("flag,mode,dtype", [(True, "neg", torch.float32), (False, "pos", torch.float64)])
def test_constant_arguments_in_every_position(flag, mode, dtype):
    def fn(x, y):
        return fns.Mixed.apply(0.75, x, 3, y, (1, 2.5), flag, mode, None, dtype)

    x, y = random_input((2, 3), requires_grad=True, seed=4), random_input((2, 3), requires_grad=True, seed=5)
    compiled = compile_ort(fn)
    out = check_against_eager(fn, compiled, [x, y])
    assert out.dtype == dtype
    node = next(n for g in current_graphs() for n in g.exported.model.graph.node if n.op_type == "PythonOp")
    attrs = {a.name: a for a in node.attribute}
    assert attrs["input_convention"].s == b"cdcdccccc"
    assert attrs["constant_args"].s.decode().startswith(f'[0.75,3,{{"tuple":[1,2.5]}},{str(flag).lower()}')


CONSTANTS = [2.5, 3, (1, (2.0, "a")), True, "mode", None]


@pytest.mark.parametrize("position", range(len(CONSTANTS) + 1))
def test_scalar_tuple_bool_string_none_around_the_tensor(position):
    args = CONSTANTS[:position] + ["x"] + CONSTANTS[position:]

    def fn(x):
        return fns.VariadicScale.apply(*[x if a == "x" else a for a in args]) + 1

    out = check_against_eager(fn, compile_ort(fn), [random_input((3,), requires_grad=True, seed=position)])
    assert out.requires_grad
    assert python_op_nodes()[("PythonOp", name(fns.VariadicScale))] == 1


def test_keyword_arguments_and_objects_by_reference():
    class Config:
        factor = 1.75

    config = Config()

    def fn(x):
        return fns.ScaleByObject.apply(x, config=config) + 1

    x = random_input((4,), requires_grad=True, seed=6)
    compiled = compile_ort(fn)
    check_against_eager(fn, compiled, [x])
    other = Config()
    other.factor = -0.5
    config = other  # a different object: guarded by identity, so this compiles again
    check_against_eager(fn, compiled, [x])


def test_inplace_function_with_mark_dirty():
    def fn(x):
        y = x * 2
        z = fns.InplaceScale.apply(y, 1.5)
        return y + z, z

    x = random_input((3, 4), requires_grad=True, seed=7)
    out = check_against_eager(fn, compile_ort(fn), [x])
    assert out[1].requires_grad


def test_materialize_grads_and_needs_input_grad():
    def fn(x):
        a, _ = fns.NoMaterialize.apply(x)
        return a

    x = random_input((5,), requires_grad=True, seed=8)
    fns.CALLS.pop("no_materialize_none", None)
    check_against_eager(fn, compile_ort(fn), [x])
    # Eager passes None for the unused output; so does the PythonOpGrad, as the Function asked.
    assert fns.CALLS["no_materialize_none"] == (False, True)

    def fn2(a, b):
        return fns.NeedsInputGrad.apply(a, b)

    a, b = random_input((3,), requires_grad=True, seed=9), random_input((3,), seed=10)
    check_against_eager(fn2, compile_ort(fn2), [a, b])
    assert fns.CALLS["needs_input_grad"] == (True, False)


def test_same_class_name_in_two_modules():
    def fn(x):
        return fns.Scale.apply(x) + twin.Scale.apply(x)

    x = random_input((6,), requires_grad=True, seed=11)
    out = check_against_eager(fn, compile_ort(fn), [x])
    torch.testing.assert_close(out.detach(), x.detach() * 5)
    nodes = python_op_nodes()
    assert nodes[("PythonOp", "python_op_functions.Scale")] == 1
    assert nodes[("PythonOp", "python_op_functions_twin.Scale")] == 1


def test_eval_mode_and_no_grad():
    model = GeluMlp(fns.CustomGelu).eval()
    compiled = compile_ort(model)
    x = random_input((3, 8), seed=12)
    check_against_eager(model, compiled, [x], list(model.parameters()))  # eval with grads: fw + bw
    with torch.no_grad():
        out = compiled(x)
        assert not out.requires_grad
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    assert any(op == "PythonOp" for op, _ in python_op_nodes())
    assert live_contexts() == 0  # without grad no context is kept


def test_no_forward_context_outlives_its_step():
    model = GeluMlp(fns.NumpyErfGelu)
    compiled = compile_ort(model)
    counters = engine_counters()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gc.collect()
    before = live_contexts()
    for step in range(4):
        loss = compiled(random_input((4, 8), seed=20 + step)).sum()
        assert live_contexts() == before + 1  # kept for the backward
        loss.backward()
        opt.step()
        opt.zero_grad()
        del loss
        gc.collect()
        assert live_contexts() == before
    out = compiled(random_input((4, 8), seed=30)).sum()  # a forward whose backward never runs
    assert live_contexts() == before + 1
    del out
    gc.collect()
    assert live_contexts() == before
    assert_engine_ran_since(counters)


def test_retain_graph_runs_the_backward_twice():
    def fn(x):
        return fns.CustomGelu.apply(x * 2)

    x = random_input((5,), requires_grad=True, seed=13)
    x_eager = x.detach().clone().requires_grad_()
    fn(x_eager).sum().backward()
    compiled = compile_ort(fn)
    counters = engine_counters()
    y = compiled(x).sum()
    y.backward(retain_graph=True)
    first = x.grad.clone()
    y.backward()
    assert_engine_ran_since(counters)
    torch.testing.assert_close(first, x_eager.grad, rtol=1e-4, atol=1e-5)  # eager's gradient, then twice it
    torch.testing.assert_close(x.grad, first * 2)


def test_ortmodule_runs_functions_as_python_ops():
    from torch_ort_backend import ORTModule

    model = GeluMlp(fns.NumpyErfGelu)
    compile_ort(model)  # a clean TorchDynamo state, and python_op_nodes() counts from here
    counters = engine_counters()
    wrapped = ORTModule(model)
    eager_model = GeluMlp(fns.NumpyErfGelu)
    x = random_input((2, 8), seed=14)
    torch.testing.assert_close(wrapped(x), eager_model(x), rtol=1e-4, atol=1e-5)
    wrapped(x).sum().backward()
    eager_model(x).sum().backward()
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert_engine_ran_since(counters)
    nodes = python_op_nodes()
    assert nodes[("PythonOp", name(fns.NumpyErfGelu))] >= 1 and nodes[("PythonOpGrad", name(fns.NumpyErfGelu))] == 1, \
        nodes

