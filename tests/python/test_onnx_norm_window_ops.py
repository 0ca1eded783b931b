"""LpNormalization, MeanVarianceNormalization, LRN and the signal windows (HannWindow,
HammingWindow, BlackmanWindow), one node each through our InferenceSession, against float64 numpy
on random data (onnx's node tests, in test_onnx_conformance.py, check their fixed cases). The
kernels compute in float64 and round once, so each result is within one rounding of its type."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import torch_ort_backend as tob

TYPES = {torch.float32: TensorProto.FLOAT, torch.float64: TensorProto.DOUBLE,
         torch.float16: TensorProto.FLOAT16, torch.bfloat16: TensorProto.BFLOAT16}
UNIT = {torch.float32: 2.0**-24, torch.float64: 2.0**-52, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
IDS = [str(t).split(".")[1] for t in TYPES]


def _run(node: onnx.NodeProto, inputs: dict, out_type: int, opset: int, out_shape=None) -> torch.Tensor:
    ins = [helper.make_tensor_value_info(k, TYPES[v.dtype] if v.dtype in TYPES else TensorProto.INT64, list(v.shape))
           for k, v in inputs.items()]
    if out_shape is None:
        out_shape = list(next(iter(inputs.values())).shape)
    graph = helper.make_graph([node], node.op_type, ins, [helper.make_tensor_value_info("y", out_type, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    (y,) = tob.InferenceSession(model).run(None, inputs)
    return y


def _x(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    mag = torch.rand(*shape, generator=gen, dtype=torch.float64) * 1.9 + 0.1
    sign = torch.where(torch.rand(*shape, generator=gen) < 0.5, -1.0, 1.0).double()
    return (mag * sign).to(dtype)


def _check(got: torch.Tensor, want: np.ndarray, dtype: torch.dtype) -> None:
    assert got.dtype == dtype
    err = np.abs(got.double().numpy() - want)
    bound = UNIT[dtype] * np.maximum(np.abs(want), 1e-3) + 1e-12
    assert (err <= bound).all(), f"max error {err.max():.3g}"


@pytest.mark.parametrize("dtype", list(TYPES), ids=IDS)
@pytest.mark.parametrize("p, axis", [(1, -1), (2, 1), (2, 0)])
def test_lp_normalization(dtype, p, axis):
    x = _x((3, 5, 4), dtype, seed=p + axis)
    y = _run(helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis), {"x": x}, TYPES[dtype], 22)
    x64 = x.double().numpy()
    norm = np.sum(np.abs(x64) ** p, axis=axis, keepdims=True) ** (1.0 / p)
    _check(y, x64 / norm, dtype)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_of_an_all_zero_slice_is_zero(p):
    x = _x((2, 4), torch.float32, seed=5)
    x[1] = 0.0
    y = _run(helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=1), {"x": x}, TensorProto.FLOAT, 22)
    x64 = x.double().numpy()
    norm = np.sum(np.abs(x64[0]) ** p) ** (1.0 / p)
    _check(y[:1], x64[:1] / norm, torch.float32)
    assert torch.equal(y[1], torch.zeros(4))


@pytest.mark.parametrize("dtype", list(TYPES), ids=IDS)
@pytest.mark.parametrize("axes", [None, [1], [0, 3]])
def test_mean_variance_normalization(dtype, axes):
    x = _x((2, 3, 4, 5), dtype, seed=7)
    attrs = {} if axes is None else {"axes": axes}
    y = _run(helper.make_node("MeanVarianceNormalization", ["x"], ["y"], **attrs), {"x": x}, TYPES[dtype], 13)
    x64 = x.double().numpy()
    reduce = tuple(axes or [0, 2, 3])
    mean = x64.mean(axis=reduce, keepdims=True)
    std = np.sqrt((x64**2).mean(axis=reduce, keepdims=True) - mean**2)
    _check(y, (x64 - mean) / (std + 1e-9), dtype)


@pytest.mark.parametrize("dtype", list(TYPES), ids=IDS)
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_lrn(dtype, size):
    x = _x((2, 6, 3, 3), dtype, seed=size)
    # ONNX float attributes are float32: the reference uses the values the node carries.
    alpha, beta, bias = (float(v) for v in np.float32([0.2, 0.6, 1.5]))
    y = _run(helper.make_node("LRN", ["x"], ["y"], alpha=alpha, beta=beta, bias=bias, size=size), {"x": x},
             TYPES[dtype], 13)
    x64 = x.double().numpy()
    squares = np.zeros_like(x64)
    c_count = x64.shape[1]
    for c in range(c_count):
        lo, hi = max(0, c - (size - 1) // 2), min(c_count - 1, c + (size - 1) - (size - 1) // 2)
        squares[:, c] = (x64[:, lo:hi + 1] ** 2).sum(axis=1)
    _check(y, x64 / (bias + alpha / size * squares) ** beta, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=IDS)
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic, dtype):
    size = 13
    y = _run(helper.make_node(op, ["size"], ["y"], periodic=periodic, output_datatype=TYPES[dtype]),
             {"size": torch.tensor(size, dtype=torch.int64)}, TYPES[dtype], 17, out_shape=[size])
    n = np.arange(size, dtype=np.float64)
    d = size if periodic else size - 1
    want = {"HannWindow": np.sin(np.pi * n / d) ** 2,
            "HammingWindow": 25 / 46 - (21 / 46) * np.cos(2 * np.pi * n / d),
            "BlackmanWindow": 0.42 - 0.5 * np.cos(2 * np.pi * n / d) + 0.08 * np.cos(4 * np.pi * n / d)}[op]
    assert y.shape == (size,)
    err = np.abs(y.double().numpy() - want)
    assert (err <= UNIT[dtype] * np.maximum(np.abs(want), 1.0) + 1e-15).all(), f"max error {err.max():.3g}"


def test_refusals_name_the_attribute():
    x = _x((2, 3), torch.float32, seed=1)
    with pytest.raises(Exception, match="LpNormalization.*'p' must be 1 or 2, got 3"):
        _run(helper.make_node("LpNormalization", ["x"], ["y"], p=3), {"x": x}, TensorProto.FLOAT, 22)
    with pytest.raises(Exception, match="LRN.*'size' must be >= 1, got 0"):
        _run(helper.make_node("LRN", ["x"], ["y"], size=0), {"x": _x((1, 2, 2), torch.float32, 2)},
             TensorProto.FLOAT, 13)
    with pytest.raises(Exception, match="output_datatype 9 is not a numeric tensor type"):
        _run(helper.make_node("HannWindow", ["size"], ["y"], output_datatype=TensorProto.BOOL),
             {"size": torch.tensor(4)}, TensorProto.BOOL, 17, out_shape=[4])
