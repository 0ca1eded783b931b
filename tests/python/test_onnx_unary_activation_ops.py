"""The trigonometric ops beyond Sin/Cos (Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh) and
the activations Celu, Mish, Swish, ThresholdedRelu, Shrink and SwiGLU, one node each through our
InferenceSession, against float64 numpy on the same (rounded) inputs, in every type they register.
onnx's node tests (test_onnx_conformance.py) check float32 with their fixed inputs; this adds the
16-bit types and random data.

Tolerance: each kernel computes in float32 (float64 for float64) and rounds once, so the relative
error is at most one unit roundoff of the type (2^-8 bfloat16, 2^-11 float16, 2^-24 float32), plus
the C library's float32 error (a few float32 ulps), checked element-wise relative to the value's
magnitude with an absolute floor of one unit at magnitude 1 for values near 0.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import torch_ort_backend as tob

TYPES = {torch.float32: TensorProto.FLOAT, torch.float64: TensorProto.DOUBLE,
         torch.float16: TensorProto.FLOAT16, torch.bfloat16: TensorProto.BFLOAT16}
UNIT = {torch.float32: 2.0**-24, torch.float64: 2.0**-53, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
LIBM_SLACK = 8 * 2.0**-24


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# op -> (float64 reference, attributes, input range (lo, hi), first opset, first opset with float64 and
# the 16-bit types)
CASES = {
    "Tan": (np.tan, {}, (-1.2, 1.2), 7, 22),
    "Asin": (np.arcsin, {}, (-0.95, 0.95), 7, 22),
    "Acos": (np.arccos, {}, (-0.95, 0.95), 7, 22),
    "Atan": (np.arctan, {}, (-4.0, 4.0), 7, 22),
    "Sinh": (np.sinh, {}, (-3.0, 3.0), 9, 22),
    "Cosh": (np.cosh, {}, (-3.0, 3.0), 9, 22),
    "Asinh": (np.arcsinh, {}, (-4.0, 4.0), 9, 22),
    "Acosh": (np.arccosh, {}, (1.05, 4.0), 9, 22),
    "Atanh": (np.arctanh, {}, (-0.95, 0.95), 9, 22),
    "Celu": (lambda x: np.maximum(0, x) + np.minimum(0, 0.7 * (np.exp(x / 0.7) - 1)), {"alpha": 0.7}, (-3.0, 3.0),
             12, 28),
    "Mish": (lambda x: x * np.tanh(np.log1p(np.exp(x))), {}, (-3.0, 3.0), 18, 22),
    "Swish": (lambda x: x * _sigmoid(1.5 * x), {"alpha": 1.5}, (-3.0, 3.0), 24, 24),
    "ThresholdedRelu": (lambda x: np.where(x > 0.4, x, 0.0), {"alpha": 0.4}, (-2.0, 2.0), 10, 22),
    "Shrink": (lambda x: np.where(x < -0.6, x + 0.25, np.where(x > 0.6, x - 0.25, 0.0)),
               {"bias": 0.25, "lambd": 0.6}, (-2.0, 2.0), 9, 9),
}


def _model(op: str, dtype: torch.dtype, opset: int, attrs: dict, inputs: int = 1) -> onnx.ModelProto:
    names = ["x", "y"][:inputs]
    graph = helper.make_graph([helper.make_node(op, names, ["out"], **attrs)], op,
                              [helper.make_tensor_value_info(n, TYPES[dtype], [3, 41]) for n in names],
                              [helper.make_tensor_value_info("out", TYPES[dtype], [3, 41])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _uniform(lo: float, hi: float, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(3, 41, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    return torch.where(x == 0, torch.tensor(0.5, dtype=dtype), x)  # non-zero


def _check(got: torch.Tensor, want: np.ndarray, dtype: torch.dtype, what: str) -> None:
    assert got.dtype == dtype, what
    bound = (UNIT[dtype] + LIBM_SLACK) * np.maximum(np.abs(want), 1.0)
    err = np.abs(got.double().numpy() - want)
    assert (err <= bound).all(), f"{what}: max error {err.max():.3g} where the bound is {bound[err.argmax() // 1]}"


@pytest.mark.parametrize("dtype", list(TYPES), ids=[str(t).split(".")[1] for t in TYPES])
@pytest.mark.parametrize("op", list(CASES))
def test_unary_op_against_float64(op, dtype):
    ref, attrs, (lo, hi), first, wide = CASES[op]
    opset = first if dtype == torch.float32 else wide
    x = _uniform(lo, hi, dtype, seed=len(op))
    if op == "Shrink" and dtype == torch.bfloat16:  # Shrink-9's types have no bfloat16
        with pytest.raises(Exception, match="Shrink.*bfloat16"):
            tob.InferenceSession(_model(op, dtype, opset, attrs)).run(None, {"x": x})
        return
    (got,) = tob.InferenceSession(_model(op, dtype, opset, attrs)).run(None, {"x": x})
    _check(got, ref(x.double().numpy()), dtype, f"{op} {dtype} opset {opset}")


@pytest.mark.parametrize("dtype", list(TYPES), ids=[str(t).split(".")[1] for t in TYPES])
def test_swiglu_against_float64(dtype):
    a, b = _uniform(-3, 3, dtype, seed=1), _uniform(-2, 2, dtype, seed=2)
    (got,) = tob.InferenceSession(_model("SwiGLU", dtype, 28, {"alpha": 1.3}, inputs=2)).run(None, {"x": a, "y": b})
    a64, b64 = a.double().numpy(), b.double().numpy()
    # Two float32 products before the one rounding: twice the float32 slack.
    _check(got, a64 * _sigmoid(1.3 * a64) * b64, dtype, f"SwiGLU {dtype}")


def test_swiglu_refuses_inputs_of_different_shapes():
    graph = helper.make_graph([helper.make_node("SwiGLU", ["x", "y"], ["out"])], "swiglu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3, 4])])
    with pytest.raises(Exception, match=r"SwiGLU.*same shape \(no broadcasting\)"):
        tob.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)]))


def test_celu_refuses_alpha_zero():
    with pytest.raises(Exception, match="Celu.*'alpha' must not be 0"):
        sess = tob.InferenceSession(_model("Celu", torch.float32, 12, {"alpha": 0.0}))
        sess.run(None, {"x": _uniform(-1, 1, torch.float32, seed=3)})


def test_shrink_on_integers_matches_the_reference_arithmetic():
    x = torch.tensor([[-5, -2, -1, 0, 1, 2, 5]], dtype=torch.int32)
    graph = helper.make_graph([helper.make_node("Shrink", ["x"], ["out"], bias=1.5, lambd=1.5)], "shrink",
                              [helper.make_tensor_value_info("x", TensorProto.INT32, [1, 7])],
                              [helper.make_tensor_value_info("out", TensorProto.INT32, [1, 7])])
    (got,) = tob.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])).run(
        None, {"x": x})
    want = np.where(x < -1.5, x + 1.5, np.where(x > 1.5, x - 1.5, 0)).astype(np.int32)
    np.testing.assert_array_equal(got.numpy(), want)
