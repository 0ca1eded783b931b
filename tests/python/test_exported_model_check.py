"""onnx's checker runs on every model a user hands InferenceSession (ModelProto, bytes or file), and
not on the exports the "ort" backend makes in this process (onnx_loader.parse_model: its first call
builds onnx's registry of every operator schema, which the process holds to its end). The compiled
model still matches eager and the engine ran it; a malformed ModelProto is still refused by name."""

import onnx
import pytest
import torch
import torch.nn as nn
from onnx import TensorProto, helper

import torch_ort_backend as tob
import torch_ort_backend.onnx_loader as onnx_loader
from ortmodule_helpers import assert_engine_ran, fresh_state


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


@pytest.fixture
def checks(monkeypatch):
    calls = []
    real = onnx.checker.check_model

    def counting(model, *args, **kwargs):
        calls.append(model)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx_loader.onnx.checker, "check_model", counting)
    return calls


def _add_model(bad: bool = False) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    node = helper.make_node("Add", ["x", "missing" if bad else "x"], ["y"], name="add0")
    return helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


def test_compiled_graphs_skip_the_checker(checks):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    compiled = torch.compile(model, backend="ort")
    x = torch.randn(3, 4) + 0.5
    got = compiled(x)
    torch.testing.assert_close(got, model(x))
    got.square().sum().backward()
    assert checks == []
    assert_engine_ran(2)


def test_user_models_are_checked(checks, tmp_path):
    model = _add_model()
    path = tmp_path / "add.onnx"
    onnx.save(model, path)
    for given in (model, model.SerializeToString(), str(path)):
        sess = tob.InferenceSession(given)
        x = torch.randn(2, 3)
        (y,) = sess.run(None, {"x": x})
        torch.testing.assert_close(y, x + x)
    assert len(checks) == 3


def test_a_malformed_user_model_is_refused_by_the_checker(checks):
    with pytest.raises(tob.InvalidModelError, match="not valid ONNX.*missing"):
        tob.InferenceSession(_add_model(bad=True))
    assert len(checks) == 1
