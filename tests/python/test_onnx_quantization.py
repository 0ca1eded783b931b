"""The low-precision types (float8, float8e8m0, float4e2m1, int4/uint4, int2/uint2) and the
quantization ops, one node each through our InferenceSession, against onnx's ReferenceEvaluator on
random data (onnx's node tests, in test_onnx_conformance.py, check their fixed cases): Cast between
the low-precision and the standard types bit for bit, QuantizeLinear / DequantizeLinear in every
layout and type, the integer matmuls and convolutions; and the binding: ml_dtypes arrays in and
out, packed initializers stored as raw_data and as int32_data, float8 torch tensors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import torch_ort_backend as tob
from torch_ort_backend import InvalidArgumentError

LOW = {
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
    TensorProto.UINT4: ml_dtypes.uint4,
    TensorProto.INT4: ml_dtypes.int4,
    TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
    TensorProto.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu,
    TensorProto.UINT2: ml_dtypes.uint2,
    TensorProto.INT2: ml_dtypes.int2,
}
NAMES = {k: TensorProto.DataType.Name(k) for k in LOW}
FLOAT8 = [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ]
INTS = [TensorProto.UINT4, TensorProto.INT4, TensorProto.UINT2, TensorProto.INT2]


def _model(nodes, inputs, outputs, opset=25, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _io(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _run_both(model, feeds):
    ours = tob.InferenceSession(model).run(None, feeds)
    ref = ReferenceEvaluator(model).run(None, feeds)
    return ours, ref


def _assert_same(got: np.ndarray, want: np.ndarray):
    """Bit for bit for the low-precision types (NaNs: any NaN), exactly for the others."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype in [np.dtype(t) for t in LOW.values()]:
        g, w = got.astype(np.float32), want.astype(np.float32)
        nan = np.isnan(w)
        np.testing.assert_array_equal(np.isnan(g), nan)
        np.testing.assert_array_equal(g[~nan], w[~nan])
        same_sign = np.signbit(g[~nan]) == np.signbit(w[~nan])
        assert same_sign.all(), "a zero of the wrong sign"
    else:
        np.testing.assert_array_equal(got, want)


def _floats(n, seed, spread=300.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * spread).astype(np.float32)
    specials = np.array([0, -0.0, np.inf, -np.inf, np.nan, 1e-7, -1e-7, 448, 464, 57344, 61440, 6, 7, 0.25, 0.75],
                        np.float32)
    x[: len(specials)] = specials
    return x


@pytest.mark.parametrize("to", FLOAT8 + [TensorProto.FLOAT4E2M1], ids=lambda t: NAMES[t])
@pytest.mark.parametrize("src", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_floats_to_low_precision_floats(to, src, saturate):
    np_src = helper.tensor_dtype_to_np_dtype(src)
    x = _floats(1031, seed=to + src).astype(np_src)
    attrs = {"saturate": saturate} if to in FLOAT8 else {}
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)], [_io("x", src, [1031])],
                   [_io("y", to, [1031])])
    (ours,), (ref,) = _run_both(model, {"x": x})
    _assert_same(ours, ref)


@pytest.mark.parametrize("frm", list(LOW), ids=lambda t: NAMES[t])
@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE])
def test_cast_every_code_of_a_low_precision_type_to_floats(frm, to):
    bits = {TensorProto.UINT4: 4, TensorProto.INT4: 4, TensorProto.FLOAT4E2M1: 4, TensorProto.UINT2: 2,
            TensorProto.INT2: 2}.get(frm, 8)
    # Every code; ml_dtypes keeps a sub-byte element in the low bits of its byte (as onnx's to_array).
    codes = np.arange(1 << bits, dtype=np.uint8)
    x = codes.view(LOW[frm])
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to)], [_io("x", frm, [len(codes)])],
                   [_io("y", to, [len(codes)])])
    (ours,), (ref,) = _run_both(model, {"x": x})
    _assert_same(ours, ref)


@pytest.mark.parametrize("to", INTS, ids=lambda t: NAMES[t])
@pytest.mark.parametrize("src", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.INT64])
def test_cast_to_packed_integers_truncates_and_wraps(to, src):
    rng = np.random.default_rng(to * 7 + src)
    x = rng.uniform(-20, 20, 37).astype(helper.tensor_dtype_to_np_dtype(src))
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to)], [_io("x", src, [37])], [_io("y", to, [37])])
    (ours,), (ref,) = _run_both(model, {"x": x})
    _assert_same(ours, ref)


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_float8e8m0_round_modes(mode, saturate):
    rng = np.random.default_rng(5)
    x = (np.exp2(rng.uniform(-130, 127, 500)) * rng.uniform(1, 2, 500)).astype(np.float32)
    x[:4] = [0, np.nan, np.inf, 3.0]
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate,
                                     round_mode=mode)], [_io("x", TensorProto.FLOAT, [500])],
                   [_io("y", TensorProto.FLOAT8E8M0, [500])])
    (ours,), (ref,) = _run_both(model, {"x": x})
    _assert_same(ours, ref)


QTYPES = [TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16, *INTS, *FLOAT8,
          TensorProto.FLOAT4E2M1]


def _zero_points(qtype, shape, rng):
    if qtype in FLOAT8 or qtype == TensorProto.FLOAT4E2M1:
        return np.zeros(shape, np.float32).astype(LOW[qtype])
    np_t = helper.tensor_dtype_to_np_dtype(qtype)
    info = ml_dtypes.iinfo(np_t)
    z = rng.integers(int(info.min), int(info.max) + 1, size=shape)
    z.flat[0] = int(info.min)
    if z.size > 1:
        z.flat[1] = int(info.max)
    return z.astype(np_t)


LAYOUTS = {  # x shape, scale shape, attributes
    "per_tensor": ((4, 6, 5), (), {}),
    "per_axis_negative": ((4, 6, 5), (6,), {"axis": -2}),
    "blocked_partial": ((4, 6, 5), (4, 6, 2), {"axis": 2, "block_size": 3}),
    "blocked_axis0": ((4, 6, 5), (2, 6, 5), {"axis": 0, "block_size": 3}),
}


@pytest.mark.parametrize("qtype", QTYPES, ids=lambda t: TensorProto.DataType.Name(t))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_quantize_and_dequantize_against_the_reference(qtype, layout):
    xshape, sshape, attrs = LAYOUTS[layout]
    rng = np.random.default_rng(list(LAYOUTS).index(layout) * 100 + qtype)
    x = (rng.standard_normal(xshape) * 40).astype(np.float32)
    scale = rng.uniform(0.2, 3, sshape).astype(np.float32)
    zp = _zero_points(qtype, sshape, rng)
    q = _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)],
               [_io("x", TensorProto.FLOAT, list(xshape)), _io("s", TensorProto.FLOAT, list(sshape)),
                _io("z", qtype, list(sshape))], [_io("y", qtype, list(xshape))])
    (ours,), (ref,) = _run_both(q, {"x": x, "s": scale, "z": zp})
    _assert_same(ours, ref)
    dq = _model([helper.make_node("DequantizeLinear", ["y", "s", "z"], ["x"], **attrs)],
                [_io("y", qtype, list(xshape)), _io("s", TensorProto.FLOAT, list(sshape)), _io("z", qtype, list(sshape))],
                [_io("x", TensorProto.FLOAT, list(xshape))])
    (ours,), (ref,) = _run_both(dq, {"y": ref, "s": scale, "z": zp})
    _assert_same(ours, ref)


@pytest.mark.parametrize("xtype, stype", [(TensorProto.FLOAT16, TensorProto.FLOAT16),
                                          (TensorProto.BFLOAT16, TensorProto.BFLOAT16),
                                          (TensorProto.FLOAT, TensorProto.FLOAT16),
                                          (TensorProto.FLOAT16, TensorProto.FLOAT)])
def test_quantize_divides_in_numpys_type(xtype, stype):
    rng = np.random.default_rng(xtype * 3 + stype)
    x = (rng.standard_normal(300) * 60).astype(helper.tensor_dtype_to_np_dtype(xtype))
    s = np.array(0.37, helper.tensor_dtype_to_np_dtype(stype))
    model = _model([helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=TensorProto.INT8)],
                   [_io("x", xtype, [300]), _io("s", stype, [])], [_io("y", TensorProto.INT8, [300])])
    (ours,), (ref,) = _run_both(model, {"x": x, "s": s})
    _assert_same(ours, ref)


def test_quantize_precision_attribute():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(300) * 60).astype(np.float32)
    s = np.array(0.37, np.float32)
    model = _model([helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=TensorProto.UINT8,
                                     precision=TensorProto.FLOAT16)],
                   [_io("x", TensorProto.FLOAT, [300]), _io("s", TensorProto.FLOAT, [])],
                   [_io("y", TensorProto.UINT8, [300])])
    (ours,), (ref,) = _run_both(model, {"x": x, "s": s})
    _assert_same(ours, ref)


@pytest.mark.parametrize("a_t, b_t", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8),
                                      (np.int8, np.uint8)])
def test_matmul_integer_and_qlinear_matmul(a_t, b_t):
    rng = np.random.default_rng(3)
    a = rng.integers(np.iinfo(a_t).min, np.iinfo(a_t).max + 1, (2, 7, 45)).astype(a_t)
    b = rng.integers(np.iinfo(b_t).min, np.iinfo(b_t).max + 1, (45, 33)).astype(b_t)
    za = np.array(np.iinfo(a_t).max, a_t)
    zb = np.array(np.iinfo(b_t).min, b_t)
    ta, tb = helper.np_dtype_to_tensor_dtype(np.dtype(a_t)), helper.np_dtype_to_tensor_dtype(np.dtype(b_t))
    mi = _model([helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])],
                [_io("a", ta, [2, 7, 45]), _io("b", tb, [45, 33]), _io("za", ta, []), _io("zb", tb, [])],
                [_io("y", TensorProto.INT32, [2, 7, 33])], opset=10)
    (ours,), (ref,) = _run_both(mi, {"a": a, "b": b, "za": za, "zb": zb})
    _assert_same(ours, ref)
    feeds = {"a": a, "as": np.array([0.013], np.float32), "za": za.reshape(1), "b": b,
             "bs": np.array([0.0071], np.float32), "zb": zb.reshape(1), "ys": np.array([0.9], np.float32),
             "yz": np.array([-5], np.int8)}
    qm = _model([helper.make_node("QLinearMatMul", list(feeds), ["y"])],
                [_io("a", ta, [2, 7, 45]), _io("as", TensorProto.FLOAT, [1]), _io("za", ta, [1]), _io("b", tb, [45, 33]),
                 _io("bs", TensorProto.FLOAT, [1]), _io("zb", tb, [1]), _io("ys", TensorProto.FLOAT, [1]),
                 _io("yz", TensorProto.INT8, [1])], [_io("y", TensorProto.INT8, [2, 7, 33])], opset=21)
    (ours,), (ref,) = _run_both(qm, feeds)
    _assert_same(ours, ref)


@pytest.mark.parametrize("x_t", [np.uint8, np.int8])
def test_conv_integer_and_qlinear_conv(x_t):
    rng = np.random.default_rng(4)
    x = rng.integers(np.iinfo(x_t).min, np.iinfo(x_t).max + 1, (2, 4, 9, 8)).astype(x_t)
    w = rng.integers(-128, 128, (6, 2, 3, 3)).astype(np.int8)
    xz = np.array(np.iinfo(x_t).max - 3, x_t)
    wz = rng.integers(-128, 128, (6,)).astype(np.int8)
    tx = helper.np_dtype_to_tensor_dtype(np.dtype(x_t))
    attrs = {"group": 2, "strides": [2, 1], "pads": [1, 1, 0, 2], "dilations": [1, 2]}
    ci = _model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)],
                [_io("x", tx, [2, 4, 9, 8]), _io("w", TensorProto.INT8, [6, 2, 3, 3]), _io("xz", tx, []),
                 _io("wz", TensorProto.INT8, [6])], [_io("y", TensorProto.INT32, [2, 6, 4, 7])], opset=10)
    (ours,), (ref,) = _run_both(ci, {"x": x, "w": w, "xz": xz, "wz": wz})
    _assert_same(ours, ref)
    feeds = {"x": x, "xs": np.array(0.05, np.float32), "xz": xz, "w": w,
             "ws": rng.uniform(0.001, 0.02, 6).astype(np.float32), "wz": np.zeros(6, np.int8),
             "ys": np.array(0.7, np.float32), "yz": np.array(7, x_t),
             "b": rng.integers(-3000, 3000, 6).astype(np.int32)}
    qc = _model([helper.make_node("QLinearConv", list(feeds), ["y"], **attrs)],
                [_io("x", tx, [2, 4, 9, 8]), _io("xs", TensorProto.FLOAT, []), _io("xz", tx, []),
                 _io("w", TensorProto.INT8, [6, 2, 3, 3]), _io("ws", TensorProto.FLOAT, [6]),
                 _io("wz", TensorProto.INT8, [6]), _io("ys", TensorProto.FLOAT, []), _io("yz", tx, []),
                 _io("b", TensorProto.INT32, [6])], [_io("y", tx, [2, 6, 4, 7])], opset=10)
    (ours,), (ref,) = _run_both(qc, feeds)
    _assert_same(ours, ref)


@pytest.mark.parametrize("dtype", [TensorProto.INT4, TensorProto.UINT2, TensorProto.FLOAT4E2M1,
                                   TensorProto.FLOAT8E5M2])
@pytest.mark.parametrize("raw", [True, False])
def test_initializers_as_raw_data_and_int32_data(dtype, raw):
    """A 7-element low-precision initializer (odd: the last byte is partly padding) stored either way."""
    values = np.array([0, 1, -1, 1, 0, -1, 1], np.float32) if dtype in (TensorProto.INT4, TensorProto.FLOAT4E2M1,
                                                                          TensorProto.FLOAT8E5M2) \
        else np.array([0, 1, 2, 3, 2, 1, 0], np.float32)
    arr = values.astype(LOW[dtype])
    init = numpy_helper.from_array(arr, "w")
    if not raw:  # onnx's int32_data form: one packed byte (or one float8 byte) per entry
        data = init.raw_data
        init.ClearField("raw_data")
        init.int32_data.extend(np.frombuffer(data, np.uint8).astype(np.int32).tolist())
    assert init.data_type == dtype
    model = _model([helper.make_node("Cast", ["w"], ["y"], to=TensorProto.FLOAT)], [],
                   [_io("y", TensorProto.FLOAT, [7])], initializers=[init])
    (ours,) = tob.InferenceSession(model).run(None, {})
    np.testing.assert_array_equal(ours, values)


def test_a_float8_constant_attribute():
    t = numpy_helper.from_array(np.array([1.5, -448, 0.0625], ml_dtypes.float8_e4m3fn), "c")
    model = _model([helper.make_node("Constant", [], ["c"], value=t),
                    helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)], [],
                   [_io("y", TensorProto.FLOAT, [3])])
    (ours,) = tob.InferenceSession(model).run(None, {})
    np.testing.assert_array_equal(ours, np.array([1.5, -448, 0.0625], np.float32))


def test_ml_dtypes_feeds_and_outputs_and_torch_float8():
    """ml_dtypes arrays in and out (packed inside the engine), float8 torch tensors in and out, and a
    packed output refused for torch by name."""
    x4 = np.array([-8, 7, 3, -1, 0], ml_dtypes.int4)
    m = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT4),
                helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT8E4M3FN)],
               [_io("x", TensorProto.INT4, [5])], [_io("y", TensorProto.INT4, [5]), _io("f", TensorProto.FLOAT8E4M3FN, [5])])
    sess = tob.InferenceSession(m)
    y, f = sess.run(None, {"x": x4})
    assert y.dtype == ml_dtypes.int4 and f.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(y.astype(np.int8), x4.astype(np.int8))
    np.testing.assert_array_equal(f.astype(np.float32), x4.astype(np.float32))
    with pytest.raises(InvalidArgumentError, match="tensor\\(int4\\) has no torch equivalent"):
        sess.run(None, {"x": x4}, as_torch=True)
    m8 = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E5M2)],
                [_io("x", TensorProto.FLOAT8E4M3FN, [4])], [_io("y", TensorProto.FLOAT8E5M2, [4])])
    xt = torch.tensor([1.0, -2.5, 448.0, 0.01]).to(torch.float8_e4m3fn)
    (yt,) = tob.InferenceSession(m8).run(None, {"x": xt})
    assert yt.dtype == torch.float8_e5m2
    torch.testing.assert_close(yt.float(), xt.float().to(torch.float8_e5m2).float(), rtol=0, atol=0)
