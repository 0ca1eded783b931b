"""ORTModule compatibility: what onnxruntime-training documented about its ORTModule, checked on ours.

Written from onnxruntime-training's documentation and API reference, not its code or tests:
- [API] https://onnxruntime.ai/docs/api/python/ortmodule/api.html: ORTModule(module, debug_options)
  "providing forward(), backward() along with all others torch.nn.Module's APIs"; forward(*inputs,
  **kwargs) takes "positional, variable positional" and "keyword and variable keyword" arguments and
  returns "the output as expected from the forward method ... tensors, nested sequences of tensors
  and nested dictionaries of tensor values"; the `module` property is the wrapped module.
- [GUIDE] docs/ORTModule_Training_Guidelines.md (/work/shared/reference): `model = ORTModule(model)`
  is the only change; ORTMODULE_FALLBACK_POLICY (FALLBACK_DISABLE makes failures errors); not
  compatible with torch.nn.DataParallel.
- [OVERVIEW] https://onnxruntime.ai/docs/api/python/ortmodule/overview.html: a drop-in replacement;
  "standard PyTorch debugging techniques ... probing the computed gradients on the model's parameters".
- [PR6777] forward carries the wrapped forward's signature (HuggingFace reads it to pick batch keys).
- [PR8798] attribute lookups ORTModule lacks go to the wrapped module, attribute writes land on it,
  and the wrapped module's custom methods are bound to the ORTModule so `self(...)` inside them goes
  through ORTModule; names that collide with ORTModule's draw a warning.

Every test compares with the plain module in eager PyTorch and checks that the engine ran where
onnxruntime-training would have run ONNX Runtime (and did not where it would have fallen back).
"""

from __future__ import annotations

import copy
import inspect
import io
import warnings

import pytest
import torch
from torch import nn

from ortmodule_helpers import RTOL, ATOL, assert_engine_ran, fresh_state
from torch_ort_backend import FallbackWarning, ORTModule, compile_stats
from torch_ort_backend.errors import ORTModuleIOError, ORTModuleTorchModelException


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) + 0.1) * torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)


def _twins(make) -> tuple[nn.Module, ORTModule]:
    torch.manual_seed(0)
    eager = make()
    return eager, ORTModule(copy.deepcopy(eager))


def _runs() -> int:
    return compile_stats().runs


class Classifier(nn.Module):
    """A model with the kinds of members a user model has: submodules, a parameter, a buffer, a
    plain attribute, a property, custom methods (one calling self(...), one self.forward(...), one
    writing an attribute, one using super()) and a forward with defaults and keyword-only arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(6, 5)
        self.head = nn.Linear(5, 3)
        self.temperature = nn.Parameter(torch.tensor(1.5))
        self.register_buffer("offset", torch.linspace(-0.5, 0.5, 3))
        self.scale = 1.0
        self.calls = 0

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, shift: float = 0.0) -> torch.Tensor:
        h = torch.tanh(self.body(x))
        if mask is not None:
            h = h * mask
        return self.head(h) * self.temperature * self.scale + self.offset + shift

    @property
    def width(self) -> int:
        return self.body.in_features

    def training_step(self, x: torch.Tensor) -> torch.Tensor:
        return self(x).square().mean()

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward(x, shift=1.0).argmax(-1)

    def count_call(self) -> int:
        self.calls = self.calls + 1
        return self.calls

    def describe(self) -> str:
        return f"{type(self).__name__}: " + super().extra_repr()


# ---------------------------------------------------------------- wrapper transparency

def test_forward_has_the_wrapped_forwards_signature():
    """[PR6777] inspect.signature(ORTModule(m).forward) is m.forward's, per instance, so code that
    reads it (HuggingFace's column filter) picks the right batch keys; calling through it runs."""
    eager, model = _twins(Classifier)
    assert inspect.signature(model.forward) == inspect.signature(eager.forward)
    assert model.forward.__name__ == "forward" and model.forward.__doc__ == eager.forward.__doc__
    other = ORTModule(nn.Bilinear(2, 2, 1))
    assert inspect.signature(other.forward) == inspect.signature(nn.Bilinear(2, 2, 1).forward)
    assert inspect.signature(model.forward) != inspect.signature(other.forward)
    batch = {"x": _x(4, 6), "labels": torch.zeros(4), "mask": torch.ones(4, 5)}
    accepted = {k: v for k, v in batch.items() if k in inspect.signature(model.forward).parameters}
    assert sorted(accepted) == ["mask", "x"]
    torch.testing.assert_close(model(**accepted), eager(**accepted), rtol=RTOL, atol=ATOL)
    assert_engine_ran(1)


def test_module_property_is_the_wrapped_module_and_runs_eager():
    """[API] `.module` is the wrapped torch.nn.Module (what HuggingFace Trainer's save_model unwraps
    through); calling it is plain PyTorch: the engine does not run."""
    plain = Classifier()
    model = ORTModule(plain)
    assert model.module is plain
    unwrapped = model
    while hasattr(unwrapped, "module") and isinstance(unwrapped.module, nn.Module):
        unwrapped = unwrapped.module
    assert unwrapped is plain
    x = _x(2, 6)
    model.module(x)
    assert _runs() == 0
    torch.testing.assert_close(model(x), plain(x), rtol=RTOL, atol=ATOL)
    assert_engine_ran(1)


def test_custom_methods_are_bound_to_the_ortmodule_and_run_the_engine():
    """[PR8798] The wrapped module's own methods are bound to the ORTModule: self(...) and
    self.forward(...) inside them run through the engine, with eager's results and gradients."""
    eager, model = _twins(Classifier)
    x = _x(4, 6, seed=1)
    assert model.training_step.__self__ is model
    loss, want = model.training_step(x), eager.training_step(x)
    torch.testing.assert_close(loss, want, rtol=RTOL, atol=ATOL)
    assert_engine_ran(1)
    loss.backward()
    want.backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL, msg=name)
    runs = _runs()
    model.eval()
    eager.eval()
    torch.testing.assert_close(model.predict(x), eager.predict(x))
    assert _runs() > runs
    # A method that calls super() needs an instance of its own class: it stays with the wrapped module.
    assert model.describe() == eager.describe()


def test_attribute_reads_and_writes_reach_the_wrapped_module():
    """[PR8798] Lookups ORTModule lacks go to the wrapped module (plain attributes, properties,
    submodules, parameters, buffers); writes land on it, so its forward sees them (and the engine
    re-runs with the new value); a write inside a bound method lands there too."""
    plain = Classifier()
    model = ORTModule(plain)
    assert model.width == 6 and model.body is plain.body and model.temperature is plain.temperature
    assert model.offset is plain.offset and model.scale == 1.0
    x = _x(3, 6, seed=2)
    with torch.no_grad():
        before = model(x)
        model.scale = 2.0
        assert plain.scale == 2.0 and "scale" not in vars(model)
        after = model(x)
        torch.testing.assert_close(after, plain(x), rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(after - plain.offset, 2.0 * (before - plain.offset), rtol=RTOL, atol=ATOL)
    assert model.count_call() == 1 and plain.calls == 1
    model.extra = nn.Linear(2, 2)
    assert "extra" in dict(plain.named_children())
    with pytest.raises(AttributeError, match="no_such_attribute"):
        model.no_such_attribute  # noqa: B018
    assert_engine_ran(2)


def test_setting_a_bound_method_replaces_it_on_the_ortmodule_only():
    """[PR8798] A name in ORTModule's own dictionary (the bound methods) is set on the ORTModule; the
    wrapped module keeps its method."""
    plain = Classifier()
    model = ORTModule(plain)
    model.training_step = lambda x: torch.zeros(())
    assert model.training_step(_x(2, 6)).item() == 0.0
    assert plain.training_step.__func__ is Classifier.training_step


def test_names_that_collide_with_ortmodules_own_draw_one_warning():
    """[PR8798] A wrapped module's member whose name ORTModule uses itself cannot be reached through
    the ORTModule: one warning names each (and says how to reach it)."""

    class Colliding(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = nn.Linear(2, 2)  # a submodule named like ORTModule's property

        def forward(self, x):
            return self.module(x)

        def zero_grad(self, set_to_none: bool = True) -> None:  # an nn.Module override ORTModule bypasses
            super().zero_grad(set_to_none)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = ORTModule(Colliding())
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 1, messages
    assert "'module'" in messages[0] and ".module.module" in messages[0] and "zero_grad" in messages[0]
    assert isinstance(model.module, Colliding)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ORTModule(Classifier())
    assert not [w for w in caught if issubclass(w.category, UserWarning)]


def test_state_dict_moves_between_the_ortmodule_and_the_plain_module():
    """[API] state_dict/load_state_dict as nn.Module's: the same keys, checkpoints load both ways,
    and a loaded ORTModule computes with the loaded weights on the engine."""
    eager, model = _twins(Classifier)
    assert list(model.state_dict()) == list(eager.state_dict())
    other = Classifier()
    model.load_state_dict(other.state_dict())
    x = _x(2, 6, seed=3)
    torch.testing.assert_close(model(x), other(x), rtol=RTOL, atol=ATOL)
    eager.load_state_dict(model.state_dict())
    torch.testing.assert_close(eager(x), other(x), rtol=RTOL, atol=ATOL)
    assert_engine_ran(1)


@pytest.mark.parametrize("how", ["torch.save", "deepcopy"])
def test_pickled_and_copied_ortmodules_keep_signature_methods_and_engine(how: str):
    """[API] An ORTModule saves and copies as a module does; the copy is independent, keeps the
    forward signature and its own bound methods, and runs on the engine."""
    eager, model = _twins(Classifier)
    x = _x(3, 6, seed=4)
    model(x)
    if how == "torch.save":
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        clone = torch.load(buffer, weights_only=False)
    else:
        clone = copy.deepcopy(model)
    assert isinstance(clone, ORTModule) and clone.module is not model.module
    assert inspect.signature(clone.forward) == inspect.signature(eager.forward)
    assert clone.training_step.__self__ is clone
    runs = _runs()
    torch.testing.assert_close(clone.training_step(x), eager.training_step(x), rtol=RTOL, atol=ATOL)
    assert _runs() > runs
    with torch.no_grad():
        clone.head.weight.mul_(0)
    assert model.head.weight.abs().sum() > 0


def test_train_and_eval_reach_the_wrapped_module_and_inference_runs_on_the_engine():
    """[API] train()/eval() return the ORTModule and set the mode of the wrapped module and its
    children; an eval call (dropout off) gives eager's eval output, on the engine."""

    class WithDropout(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(6, 6)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.lin(x))

    eager, model = _twins(WithDropout)
    assert model.eval() is model and not model.training
    assert not model.module.training and not model.module.drop.training
    eager.eval()
    x = _x(4, 6, seed=5)
    torch.testing.assert_close(model(x), eager(x), rtol=RTOL, atol=ATOL)
    assert_engine_ran(1)
    assert model.train() is model and model.training and model.module.drop.training
    assert model.to(torch.float32) is model and model.float() is model


def test_hooks_run_around_the_engine():
    """[API] nn.Module hooks: forward pre-hooks and hooks on the ORTModule see and may replace its
    inputs and outputs; a hook on a submodule runs inside the compiled graph; parameter gradient hooks
    see the engine's gradients ([OVERVIEW]: probing gradients)."""
    eager, model = _twins(Classifier)
    seen = {}
    for m in (model, eager):
        m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
        m.register_forward_hook(lambda mod, args, out: out + 1)
        m.body.register_forward_hook(lambda mod, args, out: out * 0.5)
    model.head.weight.register_hook(lambda g: seen.setdefault("head", g.clone()))
    x = _x(4, 6, seed=6)
    out, want = model(x), eager(x)
    torch.testing.assert_close(out, want, rtol=RTOL, atol=ATOL)
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(seen["head"], eager.head.weight.grad, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(model.head.weight.grad, eager.head.weight.grad, rtol=RTOL, atol=ATOL)
    assert_engine_ran(2)


# ---------------------------------------------------------------- inputs and outputs

class Signatures(nn.Module):
    """[API] positional, variable positional, keyword, keyword-only and variable keyword arguments,
    None among them, and non-tensor values."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, *rest, gate=None, scale: float = 1.0, name: str = "sum", **extra):
        h = self.lin(x) * scale
        for r in rest:
            h = h + r
        if gate is not None:
            h = h * torch.sigmoid(gate)
        for key in sorted(extra):
            h = h + extra[key]
        return h.sum(-1) if name == "sum" else h.mean(-1)


CALLS = {
    "positional": lambda m, a, b: m(a),
    "variable_positional": lambda m, a, b: m(a, b, b * 2),
    "keyword_only_and_none": lambda m, a, b: m(a, gate=None, scale=0.5),
    "keyword_tensor": lambda m, a, b: m(a, gate=b),
    "variable_keyword": lambda m, a, b: m(a, bias=b, other=b * 3),
    "string_and_float": lambda m, a, b: m(a, b, name="mean", scale=2.5),
    "all_keywords": lambda m, a, b: m(x=a, gate=b, scale=3),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_argument_form_gives_eager_results_and_gradients(call: str):
    eager, model = _twins(Signatures)
    a, b = _x(3, 4, seed=7).requires_grad_(), _x(3, 4, seed=8)
    a_ref = a.detach().clone().requires_grad_()
    got, want = CALLS[call](model, a, b), CALLS[call](eager, a_ref, b)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(a.grad, a_ref.grad, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(model.lin.weight.grad, eager.lin.weight.grad, rtol=RTOL, atol=ATOL)
    assert_engine_ran(2)


class NestedOut(nn.Module):
    """[API] "nested sequences of tensors and nested dictionaries of tensor values" out, with None
    and Python values among them."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, batch: dict):
        h = self.lin(batch["x"]) + batch["pair"][0] * batch["pair"][1]
        return {"logits": h, "parts": [h.sum(0), (h.amax(), None)], "meta": {"rows": h.shape[0], "tag": "ok",
                                                                            "deep": {"mean": h.mean()}}}


def test_nested_inputs_and_outputs_keep_their_structure_and_values():
    eager, model = _twins(NestedOut)
    batch = {"x": _x(3, 4, seed=9), "pair": (_x(4, seed=10), _x(4, seed=11))}
    got, want = model(batch), eager(batch)
    assert got["parts"][1][1] is None and got["meta"]["rows"] == 3 and got["meta"]["tag"] == "ok"
    assert isinstance(got["parts"], list) and isinstance(got["parts"][1], tuple)
    torch.testing.assert_close(got["logits"], want["logits"], rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(got["parts"][0], want["parts"][0], rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(got["meta"]["deep"]["mean"], want["meta"]["deep"]["mean"], rtol=RTOL, atol=ATOL)
    (got["logits"].sum() + got["parts"][1][0]).backward()
    (want["logits"].sum() + want["parts"][1][0]).backward()
    torch.testing.assert_close(model.lin.weight.grad, eager.lin.weight.grad, rtol=RTOL, atol=ATOL)
    assert_engine_ran(2)


# ---------------------------------------------------------------- fallback

class Opaque:
    """A Python object no graph can hold."""


class TakesAnything(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, context=None):
        return self.lin(x)


def test_default_policy_runs_an_unsupported_input_in_eager_with_one_warning(monkeypatch):
    """[GUIDE] "if ORTModule failed to run the model using ONNX Runtime backend, it will fallback to
    use PyTorch": eager's result, one FallbackWarning, and the engine does not run."""
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY")
    eager, model = _twins(TakesAnything)
    x = _x(2, 4, seed=12)
    with pytest.warns(FallbackWarning, match="argument 'context'"):
        out = model(x, Opaque())
    torch.testing.assert_close(out, eager(x), rtol=RTOL, atol=ATOL)
    assert model.runs_eager and _runs() == 0
    model(x)  # stays in eager (no retry by default)
    assert _runs() == 0


def test_fallback_retry_tries_the_engine_again(monkeypatch):
    """[GUIDE] ORTMODULE_FALLBACK_RETRY: after a fallback the next call tries the engine again."""
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY")
    monkeypatch.setenv("ORTMODULE_FALLBACK_RETRY", "1")
    eager, model = _twins(TakesAnything)
    x = _x(2, 4, seed=13)
    with pytest.warns(FallbackWarning):
        model(x, Opaque())
    torch.testing.assert_close(model(x), eager(x), rtol=RTOL, atol=ATOL)
    assert_engine_ran(1)


def test_fallback_disable_raises_onnxruntime_trainings_exception_classes():
    """[GUIDE] FALLBACK_DISABLE: the failure is raised (ORTModuleIOError for an input, and
    ORTModuleTorchModelException for torch.nn.DataParallel, which ORTModule does not support)."""
    model = ORTModule(TakesAnything())
    with pytest.raises(ORTModuleIOError, match="context"):
        model(_x(2, 4), Opaque())
    with pytest.raises(ORTModuleTorchModelException, match="DataParallel"):
        ORTModule(nn.DataParallel(TakesAnything()))
    assert _runs() == 0


def test_data_parallel_falls_back_to_eager_under_the_default_policy(monkeypatch):
    """[GUIDE] "ORTModule is NOT compatible with torch.nn.DataParallel": under the default policy the
    module runs in eager PyTorch with one FallbackWarning, and never on the engine."""
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY")
    torch.manual_seed(0)
    inner = TakesAnything()
    with pytest.warns(FallbackWarning, match="DataParallel"):
        model = ORTModule(nn.DataParallel(copy.deepcopy(inner)))
    x = _x(2, 4, seed=14)
    torch.testing.assert_close(model(x), inner(x), rtol=RTOL, atol=ATOL)
    assert model.runs_eager and _runs() == 0
