"""Session state: graph inputs bound to torch tensors / numpy arrays that each run updates in their
own memory (InferenceSession.bind_state, SessionOptions.state_updates)."""

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import torch_ort_backend as tob
from conftest import nonzero
from torch_ort_backend.session import SessionOptions

MS = "com.microsoft"


def make_model(nodes, inputs, outputs, ms_opset=True):
    """inputs / outputs: (name, TensorProto type, shape) triples."""
    graph = helper.make_graph(
        nodes,
        "state",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(MS, 1)] if ms_opset else [])
    return helper.make_model(graph, opset_imports=opsets)


def session(model, updates):
    opts = SessionOptions()
    opts.state_updates = updates
    return tob.InferenceSession(model, opts)


def sgd_by_onnx_ops(shape):
    """W_new = W - lr * G with standard ops (kernels that do not compute in place)."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Mul", ["lr", "G"], ["step"]), helper.make_node("Sub", ["W", "step"], ["W_new"])]
    return make_model(nodes, [("lr", f, []), ("W", f, shape), ("G", f, shape)], [("W_new", f, shape)], ms_opset=False)


def test_bound_torch_tensor_is_updated_in_its_own_memory(rng):
    sess = session(sgd_by_onnx_ops([3, 4]), {"W": "W_new"})
    w = torch.from_numpy(nonzero(rng, (3, 4)))
    expected = w.clone()
    ptr = w.data_ptr()
    sess.bind_state("W", w)
    for _ in range(3):
        g = torch.from_numpy(nonzero(rng, (3, 4)))
        (w_new,) = sess.run(None, {"lr": np.float32(0.1), "G": g})
        expected -= 0.1 * g
        torch.testing.assert_close(w_new, expected)
    assert w.data_ptr() == ptr
    torch.testing.assert_close(w, expected)
    state = sess.get_state("W")
    assert isinstance(state, torch.Tensor) and state.data_ptr() == ptr


def test_bound_numpy_array_is_updated_and_frozen_inputs_stay(rng):
    f = TensorProto.FLOAT
    # W_new = W + B * G: B is bound without an update (a frozen value).
    nodes = [helper.make_node("Mul", ["B", "G"], ["BG"]), helper.make_node("Add", ["W", "BG"], ["W_new"])]
    model = make_model(nodes, [("W", f, [5]), ("B", f, [5]), ("G", f, [5])], [("W_new", f, [5])], ms_opset=False)
    sess = session(model, {"W": "W_new"})
    w, b = nonzero(rng, 5), nonzero(rng, 5)
    w0, b0 = w.copy(), b.copy()
    sess.bind_state("W", w)
    sess.bind_state("B", b)
    g = nonzero(rng, 5)
    sess.run(None, {"G": g})
    sess.run(None, {"G": g})
    np.testing.assert_allclose(w, w0 + 2 * b0 * g, rtol=1e-6)
    np.testing.assert_array_equal(b, b0)
    assert sess.get_state("W") is not w and np.shares_memory(sess.get_state("W"), w)


def test_state_errors_name_the_culprit(rng):
    sess = session(sgd_by_onnx_ops([4]), {"W": "W_new"})
    with pytest.raises(ValueError, match="state 'W': expected dtype float32, got float64"):
        sess.bind_state("W", torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="state 'W': dimension 0 must be 4"):
        sess.bind_state("W", torch.zeros(5))
    with pytest.raises(ValueError, match="state 'W': the tensor must be contiguous"):
        sess.bind_state("W", torch.zeros(4, 2)[:, 0])
    with pytest.raises(ValueError, match="state 'W': the numpy array must be C-contiguous and writeable"):
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        sess.bind_state("W", ro)
    with pytest.raises(ValueError, match="state 'W': expected a torch tensor or numpy array"):
        sess.bind_state("W", [0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="unknown input 'V'"):
        sess.bind_state("V", torch.zeros(4))
    with pytest.raises(ValueError, match="input 'W' has no bound state"):
        sess.get_state("W")
    sess.bind_state("W", torch.zeros(4))
    g = torch.from_numpy(nonzero(rng, 4))
    with pytest.raises(ValueError, match="input 'W' is bound as session state"):
        sess.run(None, {"lr": np.float32(0.1), "G": g, "W": torch.zeros(4)})


def test_state_updates_option_is_validated():
    opts = SessionOptions()
    with pytest.raises(ValueError, match="state_updates must be a dict"):
        opts.state_updates = [("W", "W_new")]
    with pytest.raises(ValueError, match="entry 'W': 3 must map a graph input name to a graph output name"):
        opts.state_updates = {"W": 3}
    model = sgd_by_onnx_ops([4])
    with pytest.raises(ValueError, match="'step' is not a graph output"):
        session(model, {"W": "step"})
    with pytest.raises(ValueError, match="'V' is not a graph input; the graph inputs are 'lr', 'W', 'G'"):
        session(model, {"V": "W_new"})
    with pytest.raises(ValueError, match="the state is float32\\[4\\] but the update is float32\\[\\]"):
        f = TensorProto.FLOAT
        m = make_model([helper.make_node("Mul", ["lr", "lr"], ["sq"])], [("lr", f, []), ("W", f, [4])],
                       [("sq", f, [])], ms_opset=False)
        session(m, {"W": "sq"})
