"""ORTModule as an nn.Module: transparency (parameters, state dicts, modes, attributes, moves,
pickling), calling conventions (positional, keyword, default, None, nested structures, non-tensor
constants), requires_grad changes, inference graphs, and ORTModules mixed with plain modules."""

from __future__ import annotations

import collections
import copy
import dataclasses
import io
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from compile_harness import flatten_outputs
from ortmodule_helpers import ATOL, RTOL, assert_engine_ran, fresh_state, train_beside_eager
from torch_ort_backend import ORTModule, compile_stats
from torch_ort_backend.compiled_graph import live_graphs


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def nonzero(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    mag = torch.rand(shape, generator=gen) * 0.9 + 0.1
    return torch.where(torch.rand(shape, generator=gen) < 0.5, -mag, mag)


class Regressor(nn.Module):
    """Linear-Sigmoid-LayerNorm-Linear with an MSE loss: forward and backward export natively."""

    def __init__(self, features: int = 8, hidden: int = 16, out: int = 4) -> None:
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, out)
        self.register_buffer("offset", torch.full((out,), 0.25))
        self.scale = 1.0

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        pred = self.head(self.norm(torch.sigmoid(self.inp(x)))) * self.scale + self.offset
        out = {"pred": pred}
        if target is not None:
            out["loss"] = F.mse_loss(pred, target)
        return out

    def describe(self) -> str:
        return f"Regressor({self.inp.in_features}->{self.head.out_features})"


def make_regressor() -> Regressor:
    torch.manual_seed(0)
    return Regressor()


def regressor_batch(step: int) -> dict[str, torch.Tensor]:
    return {"x": nonzero(6, 8, seed=step), "target": nonzero(6, 4, seed=100 + step)}


# --- transparency ------------------------------------------------------------------------------

def test_parameters_buffers_and_modules_are_the_wrapped_modules():
    """parameters(), named_parameters(), buffers(), named_buffers(), named_modules() and children()
    give the wrapped module's names and the very same tensor objects."""
    model = make_regressor()
    wrapped = ORTModule(model)
    assert [(n, id(p)) for n, p in wrapped.named_parameters()] == [(n, id(p)) for n, p in model.named_parameters()]
    assert [(n, id(b)) for n, b in wrapped.named_buffers()] == [(n, id(b)) for n, b in model.named_buffers()]
    assert [n for n, _ in wrapped.named_modules()] == [n for n, _ in model.named_modules()]
    assert [type(m) for m in wrapped.modules()] == [type(m) for m in model.modules()]
    assert list(wrapped.children()) == list(model.children())
    assert wrapped.original_module is model


def test_state_dict_keys_are_identical_and_checkpoints_move_both_ways():
    """A checkpoint saved from an ORTModule loads (strict) into the plain module and the other way
    round, through torch.save/torch.load; the loaded models compute the same outputs."""
    trained_eager, trained = train_beside_eager(make_regressor, regressor_batch, steps=2)
    assert list(trained.state_dict()) == list(trained_eager.state_dict())

    buffer = io.BytesIO()
    torch.save(trained.state_dict(), buffer)
    buffer.seek(0)
    plain = Regressor()
    plain.load_state_dict(torch.load(buffer))
    x = nonzero(3, 8, seed=7)
    torch.testing.assert_close(plain(x)["pred"], trained_eager(x)["pred"], rtol=RTOL, atol=ATOL)

    buffer = io.BytesIO()
    torch.save(trained_eager.state_dict(), buffer)
    buffer.seek(0)
    fresh = ORTModule(Regressor())
    result = fresh.load_state_dict(torch.load(buffer))
    assert not result.missing_keys and not result.unexpected_keys
    torch.testing.assert_close(fresh(x)["pred"], trained_eager(x)["pred"], rtol=RTOL, atol=ATOL)
    assert_engine_ran(5)
    assert not compile_stats().aten_fallback_ops, "Regressor's docstring says it exports natively"


def test_checkpoint_of_a_parent_module_holding_an_ortmodule():
    """A plain parent module with an ORTModule child has the state-dict keys of the same parent with
    the plain child, and loads that parent's checkpoint (strict) through nn.Module's recursion."""
    torch.manual_seed(1)
    plain_parent = nn.Sequential(nn.Linear(8, 8), Regressor())
    ort_parent = nn.Sequential(nn.Linear(8, 8), ORTModule(Regressor()))
    assert list(ort_parent.state_dict()) == list(plain_parent.state_dict())
    ort_parent.load_state_dict(plain_parent.state_dict())
    for (name, want), got in zip(plain_parent.state_dict().items(), ort_parent.state_dict().values()):
        torch.testing.assert_close(got, want, msg=lambda m, name=name: f"{name}: {m}")
    x = nonzero(4, 8, seed=3)
    torch.testing.assert_close(ort_parent(x)["pred"], plain_parent(x)["pred"], rtol=RTOL, atol=ATOL)
    assert_engine_ran(1)


def test_train_and_eval_reach_the_wrapped_module_and_its_children():
    """eval()/train() on the ORTModule set the training flag of the wrapped module and every
    submodule, and return the ORTModule."""
    model = make_regressor()
    wrapped = ORTModule(model)
    assert wrapped.eval() is wrapped
    assert not wrapped.training and not any(m.training for m in model.modules())
    assert wrapped.train() is wrapped
    assert wrapped.training and all(m.training for m in model.modules())
    with pytest.raises(ValueError, match="boolean"):
        wrapped.train("yes")


def test_attributes_and_methods_are_forwarded_and_attribute_changes_recompile():
    """Reading an attribute or calling a method of the wrapped module works on the ORTModule;
    setting a plain attribute sets it on the wrapped module, and its forward sees the new value
    (dynamo guards it) instead of a stale graph."""
    model = make_regressor()
    wrapped = ORTModule(model)
    assert wrapped.describe() == "Regressor(8->4)"
    assert wrapped.inp is model.inp and wrapped.offset is model.offset
    x = nonzero(5, 8, seed=1)
    with torch.no_grad():
        before = wrapped(x)["pred"]
        wrapped.scale = 3.0
        assert model.scale == 3.0 and "scale" not in vars(wrapped)
        after = wrapped(x)["pred"]
        torch.testing.assert_close(after, model(x)["pred"], rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(after - model.offset, 3.0 * (before - model.offset), rtol=RTOL, atol=ATOL)
    wrapped.extra = nn.Linear(2, 2)
    assert "extra" in dict(model.named_children())
    with pytest.raises(AttributeError, match="no_such_thing"):
        wrapped.no_such_thing  # noqa: B018
    assert_engine_ran(2)


def test_indexing_a_wrapped_sequential():
    """ORTModule(nn.Sequential(...))[i] is the i-th layer; a module without indexing says so."""
    seq = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    assert ORTModule(seq)[1] is seq[1]
    with pytest.raises(TypeError, match="not subscriptable"):
        ORTModule(make_regressor())[0]


def test_dtype_and_device_moves_apply_to_the_wrapped_module():
    """to(float64)/to('cpu')/float() convert the wrapped module's parameters and buffers in place,
    return the ORTModule, and the next call runs (re-compiled) in the new dtype, matching eager."""
    model = make_regressor()
    reference = copy.deepcopy(model).double()
    wrapped = ORTModule(model)
    assert wrapped.to("cpu") is wrapped
    assert wrapped.to(torch.float64) is wrapped
    assert all(p.dtype == torch.float64 for p in model.parameters()) and model.offset.dtype == torch.float64
    x = nonzero(4, 8, seed=2).double()
    out = wrapped(x)["pred"]
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, reference(x)["pred"])
    wrapped.float()
    assert model.inp.weight.dtype == torch.float32
    assert wrapped(x.float())["pred"].dtype == torch.float32
    assert_engine_ran(2)


@pytest.mark.parametrize("how", ["pickle", "torch.save", "deepcopy"])
def test_pickling_and_copying_keep_the_module_working_and_independent(how):
    """An ORTModule survives pickle, torch.save/torch.load (whole module) and deepcopy: the copy
    computes the same outputs, still shares its dictionaries with its own wrapped module, and
    training the copy leaves the original untouched."""
    wrapped = ORTModule(make_regressor())
    x = nonzero(4, 8, seed=5)
    expected = wrapped(x)["pred"].detach()
    if how == "pickle":
        clone = pickle.loads(pickle.dumps(wrapped))
    elif how == "torch.save":
        buffer = io.BytesIO()
        torch.save(wrapped, buffer)
        buffer.seek(0)
        clone = torch.load(buffer, weights_only=False)
    else:
        clone = copy.deepcopy(wrapped)
    assert isinstance(clone, ORTModule)
    assert clone._parameters is clone.original_module._parameters
    assert clone._modules is clone.original_module._modules
    torch.testing.assert_close(clone(x)["pred"], expected)
    clone(x, nonzero(4, 4, seed=6))["loss"].backward()
    with torch.no_grad():
        for p in clone.parameters():
            p -= p.grad
    torch.testing.assert_close(wrapped(x)["pred"], expected)
    assert not torch.allclose(clone(x)["pred"], expected)
    # The first output against eager (the comparisons above are of the engine with itself).
    torch.testing.assert_close(expected, make_regressor()(x)["pred"].detach(), rtol=RTOL, atol=ATOL)
    assert_engine_ran(4)


# --- calling conventions ---------------------------------------------------------------------------

class Signature(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, y=None, *, bias=None, scale=2.0):
        h = self.lin(x) * scale
        if y is not None:
            h = h + y
        if bias is not None:
            h = h - bias
        return h


@pytest.mark.parametrize("call", [
    lambda m, x, y: m(x),
    lambda m, x, y: m(x, y),
    lambda m, x, y: m(x, y=y),
    lambda m, x, y: m(x=x, y=y, bias=y * 0.5),
    lambda m, x, y: m(x, None, bias=None, scale=0.5),
    lambda m, x, y: m(x, y, scale=3),
], ids=["positional", "two-positional", "keyword", "all-keyword", "explicit-none", "int-for-float"])
def test_positional_keyword_default_and_none_arguments(call):
    """Every calling convention of forward (defaults, keywords, keyword-only, explicit None) gives
    eager's outputs and gradients."""
    torch.manual_seed(0)
    model = Signature()
    eager = copy.deepcopy(model)
    wrapped = ORTModule(model)
    x, y = nonzero(3, 4, seed=1), nonzero(3, 4, seed=2)
    got, want = call(wrapped, x, y), call(eager, x, y)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(model.lin.weight.grad, eager.lin.weight.grad, rtol=RTOL, atol=ATOL)
    assert_engine_ran(2)


Pair = collections.namedtuple("Pair", ["first", "second"])


@dataclasses.dataclass
class Features:
    dense: torch.Tensor
    extra: list


@dataclasses.dataclass
class Prediction:
    value: torch.Tensor
    parts: tuple


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, batch: dict, pair: Pair, features: Features):
        h = self.a(batch["x"]) + self.b(pair.first) * pair.second[0]
        h = h + features.dense + features.extra[0]["shift"]
        return {"pred": Prediction(h, (h.sum(), [h * 2, None])), "pair": Pair(h.mean(), h.amax()),
                "rows": batch["x"].shape[0]}


def test_nested_dicts_lists_tuples_namedtuples_and_dataclasses_in_and_out():
    """Inputs and outputs nested in dicts, lists, tuples, namedtuples and dataclasses (with None and
    Python ints inside) keep their types and values, and gradients reach both layers."""
    torch.manual_seed(0)
    model = Nested()
    eager = copy.deepcopy(model)
    wrapped = ORTModule(model)

    def inputs(seed):
        return ({"x": nonzero(3, 4, seed=seed)}, Pair(nonzero(3, 4, seed=seed + 1), [nonzero(3, 4, seed=seed + 2)]),
                Features(nonzero(3, 4, seed=seed + 3), [{"shift": nonzero(4, seed=seed + 4)}]))

    got, want = wrapped(*inputs(0)), eager(*inputs(0))
    assert isinstance(got["pred"], Prediction) and isinstance(got["pair"], Pair) and got["rows"] == 3
    assert got["pred"].parts[1][1] is None
    torch.testing.assert_close(got["pred"].value, want["pred"].value, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(got["pair"].second, want["pair"].second, rtol=RTOL, atol=ATOL)
    (got["pred"].parts[0] + got["pair"].first).backward()
    (want["pred"].parts[0] + want["pair"].first).backward()
    for name, p in eager.named_parameters():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, p.grad, rtol=RTOL, atol=ATOL)
    assert_engine_ran(2)


def test_huggingface_model_output_in_and_out():
    """A transformers ModelOutput returned by forward comes back as the same class with the same
    fields (None fields stay None), and one passed in is read like a dict."""
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs")

    class HFStyle(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, previous):
            logits = self.lin(previous.last_hidden_state)
            return modeling_outputs.SequenceClassifierOutput(loss=logits.square().mean(), logits=logits)

    torch.manual_seed(0)
    model = HFStyle()
    eager = copy.deepcopy(model)
    previous = modeling_outputs.BaseModelOutput(last_hidden_state=nonzero(2, 4, seed=1))
    got, want = ORTModule(model)(previous), eager(previous)
    assert type(got) is type(want) and got.hidden_states is None
    assert [path for path, _ in flatten_outputs(got)] == [path for path, _ in flatten_outputs(want)]
    torch.testing.assert_close(got.logits, want.logits, rtol=RTOL, atol=ATOL)
    got.loss.backward()
    want.loss.backward()
    torch.testing.assert_close(model.lin.weight.grad, eager.lin.weight.grad, rtol=RTOL, atol=ATOL)
    assert_engine_ran(2)


class Switches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, use_bias_path: bool, repeats: int, factor: float, activation: str):
        h = self.lin(x) if use_bias_path else F.linear(x, self.lin.weight)
        for _ in range(repeats):
            h = torch.tanh(h) if activation == "tanh" else torch.sigmoid(h)
        return h * factor


def test_non_tensor_inputs_are_graph_constants_and_a_change_recompiles():
    """bool, int, float and str arguments shape the graph; each new combination (and a return to an
    earlier one) gives eager's answer, never a stale graph's, and new values compiled new graphs."""
    torch.manual_seed(0)
    model = Switches()
    wrapped = ORTModule(model)
    x = nonzero(3, 4, seed=4)
    graphs = []
    with torch.no_grad():
        for args in [(True, 1, 0.5, "tanh"), (False, 1, 0.5, "tanh"), (False, 2, 0.5, "tanh"),
                     (False, 2, 1.5, "tanh"), (False, 2, 1.5, "sigmoid"), (True, 1, 0.5, "tanh")]:
            torch.testing.assert_close(wrapped(x, *args), model(x, *args), rtol=RTOL, atol=ATOL,
                                       msg=lambda m, args=args: f"arguments {args}: {m}")
            graphs.append(compile_stats().graphs)
    assert graphs[-2] > graphs[0], f"changed constants did not compile new graphs: {graphs}"
    assert_engine_ran(6)


def test_requires_grad_changes_on_parameters_and_inputs_are_honoured():
    """Freezing a layer between calls leaves its gradient None while the others match eager;
    unfreezing brings it back; an input that starts requiring grad gets eager's gradient."""
    torch.manual_seed(0)
    model = make_regressor()
    eager = copy.deepcopy(model)
    wrapped = ORTModule(model)

    def step(x):
        for m in (model, eager):
            m.zero_grad(set_to_none=True)
        wrapped(x)["pred"].square().sum().backward()
        eager(x.detach().requires_grad_(x.requires_grad))["pred"].square().sum().backward()

    def check_grads():
        for name, p in eager.named_parameters():
            mine = dict(model.named_parameters())[name]
            assert (mine.grad is None) == (p.grad is None), name
            if p.grad is not None:
                torch.testing.assert_close(mine.grad, p.grad, rtol=RTOL, atol=ATOL)

    x = nonzero(4, 8, seed=1)
    step(x)
    check_grads()
    for m in (model, eager):
        m.inp.requires_grad_(False)
    step(x)
    assert model.inp.weight.grad is None and model.head.weight.grad is not None
    check_grads()
    for m in (model, eager):
        m.inp.requires_grad_(True)
    step(x)
    assert model.inp.weight.grad is not None
    check_grads()

    x_mine = x.clone().requires_grad_(True)
    x_eager = x.clone().requires_grad_(True)
    wrapped(x_mine)["pred"].square().sum().backward()
    eager(x_eager)["pred"].square().sum().backward()
    torch.testing.assert_close(x_mine.grad, x_eager.grad, rtol=RTOL, atol=ATOL)
    assert_engine_ran(4)


# --- inference ------------------------------------------------------------------------------------

def _stages_since(serial: int) -> set[str]:
    return {g.stage for g in live_graphs() if g.serial > serial}


def _last_serial() -> int:
    graphs = live_graphs()
    return graphs[-1].serial if graphs else 0


def test_eval_mode_and_no_grad_run_an_inference_graph():
    """In eval mode (grad enabled) and under no_grad in training mode a call compiles and runs an
    inference graph (no forward/backward pair) whose outputs need no grad; in eval mode an input
    that requires grad keeps the training graph so its gradient can be taken."""
    model = make_regressor()
    wrapped = ORTModule(model)
    x = nonzero(4, 8, seed=1)

    wrapped.eval()
    start = _last_serial()
    out = wrapped(x)["pred"]
    assert _stages_since(start) == {"inference"} and not out.requires_grad
    torch.testing.assert_close(out, model(x)["pred"], rtol=RTOL, atol=ATOL)

    wrapped.train()
    start, runs = _last_serial(), compile_stats().runs
    with torch.no_grad():
        out = wrapped(x)["pred"]
    # The eval-mode graph may be reused: this forward does not depend on the training flag.
    assert _stages_since(start) <= {"inference"} and not out.requires_grad
    assert compile_stats().runs == runs + 1

    wrapped.eval()
    start = _last_serial()
    x_grad = x.clone().requires_grad_(True)
    wrapped(x_grad)["pred"].sum().backward()
    assert "forward" in _stages_since(start) and x_grad.grad is not None
    assert_engine_ran(3)


# --- ORTModules among plain modules ---------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(torch.sigmoid(self.lin(x)))


class Chain(nn.Module):
    """Plain layers around (optionally) ORTModule-wrapped blocks, one ORTModule nested in another."""

    def __init__(self, wrap: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        w = ORTModule if wrap else (lambda m: m)
        self.stem = nn.Linear(8, 16)
        self.first = w(Block(16))
        self.middle = nn.Tanh()
        self.second = w(nn.Sequential(Block(16), w(Block(16))))
        self.head = nn.Linear(16, 4)

    def forward(self, x, target):
        pred = self.head(self.second(self.middle(self.first(self.stem(x)))))
        return {"loss": F.mse_loss(pred, target), "pred": pred}


def test_ortmodules_mixed_chained_and_nested_with_plain_modules():
    """A plain model whose blocks are ORTModules (one inside another) trains like the same model
    without them: outputs, gradients and parameters over 3 SGD steps, with the same parameter names."""
    assert [n for n, _ in Chain(True).named_parameters()] == [n for n, _ in Chain(False).named_parameters()]
    eager = Chain(False)

    def as_wrapped(copy_of_eager: nn.Module) -> nn.Module:
        wrapped = Chain(True)
        wrapped.load_state_dict(copy_of_eager.state_dict())
        return wrapped

    train_beside_eager(lambda: copy.deepcopy(eager), regressor_batch, wrap=as_wrapped)
    assert_engine_ran(6)


def test_two_ortmodules_sharing_a_submodule_accumulate_its_gradient():
    """Two ORTModules built around one shared layer: the shared layer's gradient is the sum of both
    paths, as in eager, and both modules list it under their own names."""
    def build():
        torch.manual_seed(0)
        shared = nn.Linear(8, 8)
        left = nn.Sequential(shared, nn.Sigmoid(), nn.Linear(8, 4))
        right = nn.Sequential(shared, nn.Tanh(), nn.Linear(8, 4))
        return shared, left, right

    shared_e, left_e, right_e = build()
    shared_o, left_o, right_o = build()
    left_w, right_w = ORTModule(left_o), ORTModule(right_o)
    assert left_w[0] is right_w[0] is shared_o
    for step in range(2):
        x = nonzero(5, 8, seed=step)
        (left_e(x) * right_e(x)).sum().backward()
        (left_w(x) * right_w(x)).sum().backward()
        for name in ("weight", "bias"):
            torch.testing.assert_close(getattr(shared_o, name).grad, getattr(shared_e, name).grad, rtol=RTOL,
                                       atol=ATOL)
        torch.testing.assert_close(left_o[2].weight.grad, left_e[2].weight.grad, rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(right_o[2].weight.grad, right_e[2].weight.grad, rtol=RTOL, atol=ATOL)
    assert_engine_ran(4)
