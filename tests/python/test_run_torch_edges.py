"""Edges of Session.run_torch (csrc/python/torch_run.cc), the compiled graphs' fast path, and of the
checked path it falls back to: tensors without memory of their own (a ZeroTensor, a wrapper
subclass), float8, and outputs whose bytes are a constant's or a feed's (copied by the engine, so
that changing an output in place changes neither later calls nor the caller's inputs). References:
eager PyTorch and numpy."""

import numpy as np
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend.session import InferenceSession

vi = h.make_tensor_value_info


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def _session(nodes, ins, outs, inits=()) -> InferenceSession:
    g = h.make_graph(nodes, "g", ins, outs, initializer=list(inits))
    return InferenceSession(h.make_model(g, opset_imports=[h.make_opsetid("", 21)]))


def _relu() -> InferenceSession:
    return _session([h.make_node("Relu", ["x"], ["y"])], [vi("x", TP.FLOAT, [3])], [vi("y", TP.FLOAT, [3])])


def _nonzero(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(*shape, generator=g) * 1.9 + 0.1
    return t * torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)


def test_run_torch_refuses_a_zerotensor_by_name():
    with pytest.raises(ValueError, match="input 'x': has no memory to borrow"):
        _relu()._session.run_torch([torch._efficientzerotensor(3)])


def test_run_torch_refuses_a_wrapper_subclass_by_name():
    from torch.testing._internal.two_tensor import TwoTensor

    t = TwoTensor(_nonzero(3), _nonzero(3, seed=1))
    with pytest.raises(ValueError, match="input 'x': has no memory to borrow"):
        _relu()._session.run_torch([t])


def test_checked_path_runs_a_zerotensor_as_zeros():
    [y] = _relu().run(None, {"x": torch._efficientzerotensor(3)}, as_torch=True)
    torch.testing.assert_close(y, torch.zeros(3))


def test_checked_path_names_a_tensor_without_memory():
    from torch.testing._internal.two_tensor import TwoTensor

    with pytest.raises(Exception, match="input 'x'.*without memory of its own"):
        _relu().run(None, {"x": TwoTensor(_nonzero(3), _nonzero(3, seed=1))}, as_torch=True)


def test_compiled_graph_takes_a_zerotensor_after_a_real_tensor():
    def f(x):
        return torch.relu(x) + 1

    c = torch.compile(f, backend="ort")
    x = _nonzero(3)
    torch.testing.assert_close(c(x), f(x))
    z = torch._efficientzerotensor(3)
    torch.testing.assert_close(c(z), f(torch.zeros(3)))
    assert_engine_ran(2)


_FLOAT8 = [
    (TP.FLOAT8E4M3FN, torch.float8_e4m3fn),
    (TP.FLOAT8E4M3FNUZ, torch.float8_e4m3fnuz),
    (TP.FLOAT8E5M2, torch.float8_e5m2),
    (TP.FLOAT8E5M2FNUZ, torch.float8_e5m2fnuz),
]


@pytest.mark.parametrize("onnx_type,torch_dtype", _FLOAT8)
def test_run_torch_casts_to_and_from_float8(onnx_type, torch_dtype):
    x = _nonzero(6)
    to8 = _session([h.make_node("Cast", ["x"], ["y"], to=onnx_type)], [vi("x", TP.FLOAT, [6])],
                   [vi("y", onnx_type, [6])])
    [y] = to8._session.run_torch([x.clone()], [True])
    assert y.dtype == torch_dtype
    # torch's own rounding to float8 (saturating formats saturate as ONNX's Cast does by default)
    torch.testing.assert_close(y.float(), x.to(torch_dtype).float(), rtol=0, atol=0)
    back = _session([h.make_node("Cast", ["x"], ["y"], to=TP.FLOAT)], [vi("x", onnx_type, [6])],
                    [vi("y", TP.FLOAT, [6])])
    [z] = back._session.run_torch([y])
    torch.testing.assert_close(z, y.float(), rtol=0, atol=0)


def test_run_torch_refuses_an_unmapped_output_before_taking_donated_inputs():
    # a string output has no torch dtype, and the session knows its output types before the run
    s = _session([h.make_node("Cast", ["x"], ["y"], to=TP.STRING)], [vi("x", TP.FLOAT, [3])],
                 [vi("y", TP.STRING, [3])])
    args = [_nonzero(3)]
    with pytest.raises(ValueError, match="output 'y': dtype"):
        s._session.run_torch(args, [True])
    assert isinstance(args[0], torch.Tensor), "the donated input was consumed before the output check"


def _constant_and_identity_session() -> InferenceSession:
    c = numpy_helper.from_array(np.arange(4, dtype=np.float32), "c")
    return _session(
        [h.make_node("Relu", ["x"], ["r"]), h.make_node("Identity", ["x"], ["i"]),
         h.make_node("Reshape", ["c", "shape"], ["cr"])],
        [vi("x", TP.FLOAT, [3])],
        [vi("r", TP.FLOAT, [3]), vi("i", TP.FLOAT, [3]), vi("c", TP.FLOAT, [4]), vi("cr", TP.FLOAT, [2, 2])],
        [c, numpy_helper.from_array(np.array([2, 2], dtype=np.int64), "shape")],
    )


@pytest.mark.parametrize("path", ["run_torch", "run"])
def test_outputs_over_constants_and_feeds_are_copies(path):
    s = _constant_and_identity_session()
    x = _nonzero(3)
    x_before = x.clone()

    def call(x):
        if path == "run_torch":
            return s._session.run_torch([x])
        return s.run(None, {"x": x}, as_torch=True)

    r, i, c, cr = call(x)
    torch.testing.assert_close(i, x_before)
    assert i.data_ptr() != x.data_ptr(), "an Identity output aliases the caller's input"
    i.mul_(10)
    c.add_(5)
    cr.mul_(7)
    torch.testing.assert_close(x, x_before)
    r, i, c, cr = call(x)
    torch.testing.assert_close(c, torch.arange(4.0))
    torch.testing.assert_close(cr, torch.arange(4.0).reshape(2, 2))
    torch.testing.assert_close(r, torch.relu(x_before))


def test_compiled_constant_outputs_do_not_change_with_the_callers_edits():
    def f(x):
        return x + 1, torch.ones(3), torch.arange(4.0)

    c = torch.compile(f, backend="ort")
    with torch.no_grad():
        a, b, r = c(_nonzero(3))
        b.add_(5)
        r.mul_(10)
        x = _nonzero(3, seed=2)
        a, b, r = c(x)
    torch.testing.assert_close(a, x + 1)
    torch.testing.assert_close(b, torch.ones(3))
    torch.testing.assert_close(r, torch.arange(4.0))
    assert_engine_ran(2)
