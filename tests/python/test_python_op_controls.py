"""The controls of PythonOp capture, each as an ORTMODULE_* variable and as a torch.compile option:
ORTMODULE_DISABLE_CUSTOM_AUTOGRAD_SUPPORT / disable_custom_autograd_support and
torch_ort_backend.enable_custom_autograd_support(False) trace Functions through (their ops inlined,
no PythonOp); ORTMODULE_SKIPPED_AUTOGRAD_FUNCTIONS / skipped_autograd_functions does it for the
listed qualified names only; activation checkpointing is refused with an error naming
ORTMODULE_ALLOW_AUTOGRAD_CHECKPOINT unless that variable (or allow_autograd_checkpoint) is set,
and then runs as a PythonOp of CheckpointFunction with eager gradients. Outputs and gradients are
compared with eager every time; other backends never see a PythonOp."""

from __future__ import annotations

import pytest
import torch
import torch.utils.checkpoint as checkpoint
from torch import nn

import python_op_functions as fns
import torch_ort_backend
from python_op_harness import check_against_eager, compile_ort, current_graphs, python_op_nodes, random_input
from torch_ort_backend import FallbackWarning
from torch_ort_backend.autograd_function import qualified_name
from torch_ort_backend.options import resolve

GELU = qualified_name(fns.CustomGelu)
NUMPY_GELU = qualified_name(fns.NumpyErfGelu)


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")


def two_functions(x, w):
    return fns.NumpyErfGelu.apply(fns.CustomGelu.apply(x @ w)).sum(dim=-1)


def inputs():
    return [random_input((3, 4), seed=1), random_input((4, 5), requires_grad=True, seed=2)]


def engine_op_types() -> set[str]:
    return {n.op_type for g in current_graphs() for n in g.exported.model.graph.node}


def test_default_captures_every_function():
    check_against_eager(two_functions, compile_ort(two_functions), inputs())
    nodes = python_op_nodes()
    assert nodes[("PythonOp", GELU)] == 1 and nodes[("PythonOp", NUMPY_GELU)] == 1


@pytest.mark.parametrize("how", ["variable", "option", "switch"])
def test_disabled_support_traces_functions_through(how, monkeypatch):
    def fn(x, w):
        return fns.CustomGelu.apply(x @ w) * 2

    options = {}
    if how == "variable":
        monkeypatch.setenv("ORTMODULE_DISABLE_CUSTOM_AUTOGRAD_SUPPORT", "1")
    elif how == "option":
        options["disable_custom_autograd_support"] = True
    else:
        torch_ort_backend.enable_custom_autograd_support(False)
    try:
        check_against_eager(fn, compile_ort(fn, **options), inputs())
    finally:
        torch_ort_backend.enable_custom_autograd_support(True)
    assert not python_op_nodes()
    assert "Tanh" in engine_op_types() or "ATen" in engine_op_types()  # the GeLU's own ops, inlined


@pytest.mark.parametrize("how", ["variable", "option"])
def test_skipped_functions_are_traced_through(how, monkeypatch):
    options = {}
    if how == "variable":
        monkeypatch.setenv("ORTMODULE_SKIPPED_AUTOGRAD_FUNCTIONS", f" {GELU} , some.other.Fn")
    else:
        options["skipped_autograd_functions"] = [GELU]
    check_against_eager(two_functions, compile_ort(two_functions, **options), inputs())
    nodes = python_op_nodes()
    assert ("PythonOp", GELU) not in nodes
    assert nodes[("PythonOp", NUMPY_GELU)] == 1 and nodes[("PythonOpGrad", NUMPY_GELU)] == 1


def test_option_values_are_validated(monkeypatch):
    assert resolve({"skipped_autograd_functions": "a.B, c.D"}).skipped_autograd_functions == {"a.B", "c.D"}
    with pytest.raises(ValueError, match="skipped_autograd_functions"):
        resolve({"skipped_autograd_functions": 3})
    with pytest.raises(ValueError, match="allow_autograd_checkpoint"):
        resolve({"allow_autograd_checkpoint": "maybe"})
    monkeypatch.setenv("ORTMODULE_DISABLE_CUSTOM_AUTOGRAD_SUPPORT", "perhaps")
    with pytest.raises(ValueError, match="ORTMODULE_DISABLE_CUSTOM_AUTOGRAD_SUPPORT"):
        resolve()


def test_other_backends_trace_functions_themselves():
    def fn(x):
        return fns.CustomGelu.apply(x) * 2

    torch._dynamo.reset()
    seen = []

    def spy(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes)
        return gm.forward

    x = random_input((4,), requires_grad=True, seed=3)
    torch.compile(fn, backend=spy)(x)
    assert seen and not any("python_op" in t for t in seen)


class CheckpointedMlp(nn.Module):
    def __init__(self, direct: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.block = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 6))
        self.head = nn.Linear(6, 2)
        self.direct = direct

    def forward(self, x):
        if self.direct:
            h = checkpoint.CheckpointFunction.apply(self.block, True, x)
        else:
            h = checkpoint.checkpoint(self.block, x, use_reentrant=True)
        return self.head(h + x)


@pytest.mark.parametrize("direct", [False, True], ids=["checkpoint", "CheckpointFunction"])
def test_checkpoint_is_refused_by_default(direct):
    model = CheckpointedMlp(direct)
    x = random_input((3, 6), requires_grad=True, seed=4)
    with pytest.raises(Exception, match="ORTMODULE_ALLOW_AUTOGRAD_CHECKPOINT"):
        compile_ort(model)(x)


def test_checkpoint_refusal_follows_the_fallback_policy(monkeypatch):
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY")
    model = CheckpointedMlp()
    x = random_input((3, 6), requires_grad=True, seed=5)
    with pytest.warns(FallbackWarning, match="ORTMODULE_ALLOW_AUTOGRAD_CHECKPOINT"):
        out = compile_ort(model)(x)
    torch.testing.assert_close(out, model(x))


@pytest.mark.parametrize("how", ["variable", "option"])
@pytest.mark.parametrize("direct", [False, True], ids=["checkpoint", "CheckpointFunction"])
def test_allowed_checkpoint_runs_as_a_python_op(direct, how, monkeypatch):
    options = {}
    if how == "variable":
        monkeypatch.setenv("ORTMODULE_ALLOW_AUTOGRAD_CHECKPOINT", "1")
    else:
        options["allow_autograd_checkpoint"] = True
    model = CheckpointedMlp(direct)
    compiled = compile_ort(model, **options)
    for step in range(2):
        x = random_input((3, 6), requires_grad=True, seed=6 + step)
        check_against_eager(model, compiled, [x], list(model.parameters()))
    nodes = python_op_nodes()
    name = qualified_name(checkpoint.CheckpointFunction)
    assert nodes[("PythonOp", name)] == 1 and nodes[("PythonOpGrad", name)] == 1, nodes
