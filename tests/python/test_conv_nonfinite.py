"""Non-finite values through the CPU convs as torch. Conv + Relu keeps NaN (relu(NaN) = NaN) on
every conv path that fuses the Relu into its store: the blocked NchwcConv (TOB_NCHWC default), the
transposed tiles and the implicit GEMM of pre-packed weights (TOB_NCHWC=0), and the stem's
NCHW-input blocked conv; their AVX-512 stores took max(v, 0), which gives 0 for a NaN v. And an inf
stays in the channels it reaches when a blocked conv's channels do not fill their last block (the
spare lanes, kept zero). Reference: torch's conv2d + relu on the same inputs (NaN and inf positions
and every finite value)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import torch_ort_backend as tob


def _conv_relu_model(w: np.ndarray, b: np.ndarray, pads: int, residual: bool, x_shape: tuple,
                     y_shape: tuple) -> onnx.ModelProto:
    c_out, c_in, k, _ = w.shape
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pads] * 4, kernel_shape=[k, k])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    if residual:  # Conv + Add + Relu: the residual Z fused into the store as well
        nodes.append(helper.make_node("Add", ["c", "z"], ["s"]))
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, list(y_shape)))
    nodes.append(helper.make_node("Relu", ["s" if residual else "c"], ["y"]))
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))
    graph = helper.make_graph(nodes, "conv_relu", inputs, [output],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = {  # name: (c_in, c_out, kernel, pads, residual)
    "pointwise": (32, 64, 1, 0, False),
    "3x3": (16, 32, 3, 1, False),
    "3x3_residual": (16, 32, 3, 1, True),
    "stem": (3, 32, 7, 3, False),
}


@pytest.mark.parametrize("switch", [None, "0", "convs"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_relu_keeps_nan(case, switch, monkeypatch):
    if switch is None:
        monkeypatch.delenv("TOB_NCHWC", raising=False)
    else:
        monkeypatch.setenv("TOB_NCHWC", switch)
    c_in, c_out, k, pads, residual = CASES[case]
    rng = np.random.default_rng(5)
    w = rng.standard_normal((c_out, c_in, k, k)).astype(np.float32) * 0.2
    b = rng.standard_normal(c_out).astype(np.float32) * 0.1
    x = rng.standard_normal((2, c_in, 14, 14)).astype(np.float32)
    x[0, 0, 3, 4] = np.nan  # reaches every output channel at the positions whose window holds it
    x[1, c_in - 1, 10, 0] = np.nan
    feeds = {"x": torch.from_numpy(x)}
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), padding=pads)
    if residual:
        z = rng.standard_normal(tuple(ref.shape)).astype(np.float32)
        z[1, 5, 2, 2] = np.nan
        feeds["z"] = torch.from_numpy(z)
        ref = ref + torch.from_numpy(z)
    ref = torch.relu(ref).numpy()
    assert np.isnan(ref).any() and (ref == 0).any() and (ref > 0).any()
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = 2
    model = _conv_relu_model(w, b, pads, residual, x.shape, ref.shape)
    y = np.asarray(tob.InferenceSession(model.SerializeToString(), opts).run(None, feeds)[0])
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def _chain_model(w1: np.ndarray, w2: np.ndarray, x_shape: tuple, y_shape: tuple) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], kernel_shape=[1, 1])]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
                              initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("switch", [None, "0", "convs"])
@pytest.mark.parametrize("c_in", [3, 16])  # the stem's NCHW-input conv, and a blocked conv
def test_inf_stays_in_its_channels_through_a_partial_block(c_in, switch, monkeypatch):
    """A first conv of 20 output channels leaves 12 spare lanes in its last block; an inf input made
    them 0 * inf = NaN, and the next blocked conv's zero weights for them spread that NaN to every
    output channel at those positions (torch: inf)."""
    if switch is None:
        monkeypatch.delenv("TOB_NCHWC", raising=False)
    else:
        monkeypatch.setenv("TOB_NCHWC", switch)
    rng = np.random.default_rng(9)
    x = rng.uniform(0.1, 1.0, (1, c_in, 12, 12)).astype(np.float32)
    x[0, 0, 5, 6] = np.inf
    w1 = rng.uniform(0.05, 0.3, (20, c_in, 3, 3)).astype(np.float32)
    w2 = rng.uniform(0.05, 0.3, (16, 20, 1, 1)).astype(np.float32)
    ref = torch.nn.functional.conv2d(torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w1),
                                                                           padding=1)), torch.from_numpy(w2)).numpy()
    assert np.isinf(ref).any() and not np.isnan(ref).any()
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = 2
    model = _chain_model(w1, w2, x.shape, ref.shape)
    y = np.asarray(tob.InferenceSession(model.SerializeToString(), opts).run(None, {"x": torch.from_numpy(x)})[0])
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(ref))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
