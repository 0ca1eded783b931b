"""Constant MatMul/Gemm weights pre-packed once per InferenceSession (issue 15): an ONNX MLP
matches numpy float64 at batch sizes that take the small-M and the general kernel, the session
reports the packed weights in last_run_stats(), and TOB_SGEMM=0 (no pre-packing, OpenBLAS for
large M) gives the same results within float32 rounding."""

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import torch_ort_backend as tob
from torch_ort_backend import _C
from conftest import nonzero

IN, HIDDEN, OUT = 70, 300, 45


def gemm_mlp(rng):
    """x -> MatMul(w1) -> Add -> Relu -> Gemm(w2^T, b2, alpha=0.5): one weight per GEMM op."""
    inits = {
        "w1": nonzero(rng, (IN, HIDDEN)),
        "b1": nonzero(rng, (HIDDEN,)),
        "w2": nonzero(rng, (OUT, HIDDEN)),
        "b2": nonzero(rng, (OUT,)),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("Gemm", ["h2", "w2", "b2"], ["y"], name="fc2", transB=1, alpha=0.5),
    ]
    graph = helper.make_graph(
        nodes, "gemm_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model, {k: v.astype(np.float64) for k, v in inits.items()}


def reference(w, x):
    h = np.maximum(x.astype(np.float64) @ w["w1"] + w["b1"], 0.0)
    return 0.5 * h @ w["w2"].T + w["b2"], 0.5 * np.abs(h) @ np.abs(w["w2"]).T + np.abs(w["b2"])


@pytest.mark.parametrize("batch", [1, 37, 300])
def test_mlp_with_prepacked_weights_matches_float64(rng, batch):
    model, w = gemm_mlp(rng)
    sess = tob.InferenceSession(model)
    x = nonzero(rng, (batch, IN))
    for _ in range(2):  # the second run reads the same packed panels
        (y,) = sess.run(None, {"x": x})
        want, scale = reference(w, x)
        # float32 products summed over K = 70 and 300: a few unit roundoffs of the |terms|.
        np.testing.assert_array_less(np.abs(y - want), 1e-5 * scale + 1e-6)
    stats = sess.last_run_stats()
    if _C.sgemm_available():
        # w1: 10 panels of 32 columns x 70 rows; w2^T: 2 panels x 300 rows.
        assert stats["prepacked_constants"] == 2
        assert stats["prepacked_bytes"] == (10 * IN + 2 * HIDDEN) * 32 * 4
        assert any("pre-packed 2 constant inputs" in line for line in sess._session.log())
    else:
        assert stats["prepacked_constants"] == 0 and stats["prepacked_bytes"] == 0


def test_without_prepacking_same_results(rng, tmp_path):
    """TOB_SGEMM=0 in a fresh process: nothing packed, same outputs within float32 rounding."""
    model, w = gemm_mlp(rng)
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    x = nonzero(rng, (200, IN))
    np.save(tmp_path / "x.npy", x)
    script = (
        "import numpy as np, sys, torch_ort_backend as tob\n"
        f"s = tob.InferenceSession({str(path)!r})\n"
        f"y = s.run(None, {{'x': np.load({str(tmp_path / 'x.npy')!r})}})[0]\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y)\n"
        "print(s.last_run_stats()['prepacked_constants'])\n"
    )
    env = dict(os.environ, TOB_SGEMM="0")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"
    y_off = np.load(tmp_path / "y.npy")
    (y_on,) = tob.InferenceSession(model).run(None, {"x": x})
    want, scale = reference(w, x)
    np.testing.assert_array_less(np.abs(y_off - want), 1e-5 * scale + 1e-6)
    np.testing.assert_array_less(np.abs(y_on - y_off), 2e-5 * scale + 1e-6)
