"""Autograd's in-place check through the engine (issue 18): a tensor the backward needs, modified in
place after the forward, must raise as in eager PyTorch, never give a silently wrong gradient.

Each model runs eagerly, under torch.compile(backend="ort") and under ORTModule. The saved tensor is
a forward output (Softmax: the backward reads the output), an input, or a weight. Where eager raises,
ours must raise the same class with the same message (up to the name of the autograd node that
produced the tensor, which a compiled graph does not have); where eager does not raise (the edited
tensor is not needed), ours must not either, and the gradients must be eager's.

One case cannot raise under any torch.compile backend: a returned *view* of an intermediate the
backward reads (tanh(x).view(-1)). AOTAutograd hands it to the user as a non-view (_unsafe_view), so
autograd no longer links it to the saved tanh; inductor and aot_eager then return the gradient of
the edited values. Ours gives that output a buffer of its own: no error, and the gradient of what the
forward computed.
"""

from __future__ import annotations

import re
from typing import Callable

import pytest
import torch
from torch import nn

from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend import ORTModule


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


class SoftmaxHead(nn.Module):
    """The issue's model: the Softmax backward reads the Softmax output, which is the model's output."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return torch.softmax(self.lin(x), -1)


class TanhFlat(nn.Module):
    """Returns a view of the Tanh output (which the backward reads) but not the output itself."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.lin(x)).view(-1)


class Scale(nn.Module):
    """The weight gradient reads the input x."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 4))

    def forward(self, x):
        return x * self.w


class Affine(nn.Module):
    """Nothing in the backward reads the output: editing it in place is legal."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)


def _wrap(kind: str, model: nn.Module) -> Callable:
    return {"eager": model, "ort": torch.compile(model, backend="ort"), "ortmodule": ORTModule(model)}[kind]


def _edit_output(out, x, model):
    out.add_(1)


def _edit_input(out, x, model):
    x.mul_(2)


def _edit_weight_under_no_grad(out, x, model):
    with torch.no_grad():
        model.w.add_(1)


def _run(kind: str, make: Callable[[], nn.Module], edit: Callable, input_grad: bool = False
         ) -> tuple[Exception | None, list]:
    torch.manual_seed(0)
    model = make()
    x = torch.randn(2, 4, requires_grad=input_grad)
    out = _wrap(kind, model)(x)
    edit(out, x, model)
    try:
        (out * torch.linspace(0.5, 1.5, out.numel()).view(out.shape)).sum().backward()
    except RuntimeError as e:
        return e, []
    return None, [p.grad for p in model.parameters()]


def _without_node_name(message: str) -> str:
    # Eager names the autograd node that made the tensor ("which is output 0 of SoftmaxBackward0,");
    # a compiled graph has none. Everything else must be the same words.
    return re.sub(r", which is output \d+ of \w+,", "", message)


# name -> (model, edit after the forward, whether the input requires grad: x * w saves w only then)
RAISING = {
    "softmax_output": (SoftmaxHead, _edit_output, False),
    "input_read_by_backward": (Scale, _edit_input, False),
    "weight_read_by_backward": (Scale, _edit_weight_under_no_grad, True),
}


@pytest.mark.parametrize("kind", ["ort", "ortmodule"])
@pytest.mark.parametrize("name", sorted(RAISING))
def test_editing_a_saved_tensor_raises_as_in_eager(name: str, kind: str) -> None:
    make, edit, input_grad = RAISING[name]
    eager_error, _ = _run("eager", make, edit, input_grad)
    assert isinstance(eager_error, RuntimeError) and "modified by an inplace operation" in str(eager_error)
    error, grads = _run(kind, make, edit, input_grad)
    assert_engine_ran()
    assert error is not None, f"no error; the gradients were {grads}"
    assert type(error) is type(eager_error)
    assert _without_node_name(str(error)) == _without_node_name(str(eager_error))


@pytest.mark.parametrize("kind", ["ort", "ortmodule"])
def test_editing_a_returned_view_of_a_saved_intermediate_keeps_the_gradient(kind: str) -> None:
    """See the module docstring: eager raises, torch.compile cannot; ours is the unedited gradient."""
    eager_error, _ = _run("eager", TanhFlat, _edit_output)
    assert isinstance(eager_error, RuntimeError)
    torch._dynamo.reset()
    _, unedited = _run(kind, TanhFlat, lambda out, x, model: None)
    torch._dynamo.reset()
    error, grads = _run(kind, TanhFlat, _edit_output)
    assert error is None
    assert_engine_ran()
    for g, e in zip(grads, unedited):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("kind", ["ort", "ortmodule"])
def test_editing_an_output_the_backward_does_not_need_is_legal(kind: str) -> None:
    eager_error, eager_grads = _run("eager", Affine, _edit_output)
    error, grads = _run(kind, Affine, _edit_output)
    assert eager_error is None and error is None
    assert_engine_ran()
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("kind", ["ort", "ortmodule"])
def test_untouched_outputs_give_eager_gradients(kind: str) -> None:
    for make in (SoftmaxHead, TanhFlat, Scale):
        torch._dynamo.reset()
        _, eager_grads = _run("eager", make, lambda out, x, model: None)
        error, grads = _run(kind, make, lambda out, x, model: None)
        assert error is None
        for g, e in zip(grads, eager_grads):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert_engine_ran()
