"""Conv + Relu keeps NaN, as torch does (relu(NaN) = NaN), on every CPU conv path that fuses the
Relu into its store: the blocked NchwcConv (TOB_NCHWC default), the transposed tiles and the
implicit GEMM of pre-packed weights (TOB_NCHWC=0), and the stem's NCHW-input blocked conv. Their
AVX-512 stores took max(v, 0), which gives 0 for a NaN v. Reference: torch's conv2d + relu on the
same inputs (NaN positions and every finite value)."""

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
