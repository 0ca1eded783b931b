"""The recurrent ops, Einsum, Det, GroupNormalization, MaxUnpool, Unique, RoiAlign, DeformConv,
TensorScatter, ReverseSequence, the ai.onnx.preview.training optimizers and the ai.onnx.ml ops
without strings, each in a model run by InferenceSession, against onnx's reference
implementation (onnx.reference.ReferenceEvaluator) on random data: shapes and attribute values the
one-node tests leave out, the ops in the domains ai.onnx.ml and ai.onnx.preview.training loaded
from a model, and data-dependent outputs (Unique, MaxPool indices) feeding another node.
What the reference does not implement (RNN sequence_lens and activation lists, TreeEnsemble's
post transforms) is checked against float64 loops in tests/cpp/."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import torch_ort_backend as tob
from conftest import nonzero

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=22, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, rtol=1e-5, atol=1e-5):
    got = tob.InferenceSession(model).run(None, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("op,gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_recurrent_ops_match_the_reference(rng, op, gates, direction, layout):
    seq, batch, inp, hidden = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = [seq, batch, inp] if layout == 0 else [batch, seq, inp]
    state = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    feeds = {
        "X": nonzero(rng, x_shape),
        "W": nonzero(rng, [dirs, gates * hidden, inp], low=0.05, high=0.5),
        "R": nonzero(rng, [dirs, gates * hidden, hidden], low=0.05, high=0.5),
        "B": nonzero(rng, [dirs, 2 * gates * hidden], low=0.05, high=0.5),
        "h0": nonzero(rng, state),
    }
    inputs = ["X", "W", "R", "B", "", "h0"]
    outputs = ["Y", "Y_h"]
    extra = {}
    if op == "LSTM":
        feeds["c0"] = nonzero(rng, state)
        feeds["P"] = nonzero(rng, [dirs, 3 * hidden], low=0.05, high=0.5)
        inputs += ["c0", "P"]
        outputs.append("Y_c")
    if op == "GRU":
        extra["linear_before_reset"] = 1
    node = helper.make_node(op, inputs, outputs, hidden_size=hidden, direction=direction, layout=layout, **extra)
    y_shape = [seq, dirs, batch, hidden] if layout == 0 else [batch, seq, dirs, hidden]
    model = _model([node], [_vi(n, F, list(v.shape)) for n, v in feeds.items()],
                   [_vi("Y", F, y_shape)] + [_vi(o, F, state) for o in outputs[1:]])
    _check(model, feeds, rtol=1e-4)


@pytest.mark.parametrize("equation,shapes", [
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("bii->bi", [(4, 3, 3)]),
    ("abc,cd->", [(2, 3, 4), (4, 5)]),
    ("i,j->ij", [(3,), (4,)]),
])
def test_einsum_matches_the_reference(rng, equation, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    feeds = {n: nonzero(rng, s, dtype=np.float64) for n, s in zip(names, shapes)}
    want = np.einsum(equation, *feeds.values())
    model = _model([helper.make_node("Einsum", names, ["y"], equation=equation)],
                   [_vi(n, TensorProto.DOUBLE, list(s)) for n, s in zip(names, shapes)],
                   [_vi("y", TensorProto.DOUBLE, list(want.shape))])
    _check(model, feeds, rtol=1e-12, atol=1e-12)


def test_det_and_group_normalization(rng):
    x = nonzero(rng, (2, 3, 4, 4))
    model = _model([helper.make_node("Det", ["x"], ["y"])], [_vi("x", F, [2, 3, 4, 4])], [_vi("y", F, [2, 3])])
    _check(model, {"x": x}, rtol=1e-4)
    # Opset 21 (per-channel scale). onnx's checker refuses GroupNormalization-18 models (the
    # version is deprecated), so the per-group form is checked in tests/cpp/nn_vision_ops_test.cc.
    feeds = {"x": nonzero(rng, (3, 6, 5)), "s": nonzero(rng, (6,)), "b": nonzero(rng, (6,))}
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-3)
    model = _model([node], [_vi("x", F, [3, 6, 5]), _vi("s", F, [6]), _vi("b", F, [6])], [_vi("y", F, [3, 6, 5])],
                   opset=21)
    _check(model, feeds, rtol=1e-4, atol=1e-4)


def test_maxpool_indices_feed_maxunpool(rng):
    # MaxPool's indices are computed at run time; MaxUnpool puts each maximum back in place.
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    model = _model(nodes, [_vi("x", F, [2, 3, 6, 8])], [_vi("y", F, [2, 3, 6, 8])])
    (y,) = _check(model, {"x": nonzero(rng, (2, 3, 6, 8))}, rtol=0, atol=0)
    assert np.count_nonzero(y) == 2 * 3 * 3 * 4


def test_unique_output_feeds_another_node_and_its_length_varies(rng):
    nodes = [helper.make_node("Unique", ["x"], ["u", "idx", "inv", "cnt"], sorted=1, axis=1),
             helper.make_node("ReduceSum", ["u"], ["s"], keepdims=0)]
    model = _model(nodes, [_vi("x", TensorProto.INT64, [2, None, 3])],
                   [_vi("u", TensorProto.INT64, [2, None, 3]), _vi("idx", TensorProto.INT64, [None]),
                    _vi("inv", TensorProto.INT64, [None]), _vi("cnt", TensorProto.INT64, [None]),
                    _vi("s", TensorProto.INT64, [])])
    lengths = set()
    for n in (6, 11, 4):
        x = rng.integers(0, 2, size=(2, n, 3)).astype(np.int64)
        got = _check(model, {"x": x}, rtol=0, atol=0)
        lengths.add(got[0].shape[1])
    assert len(lengths) > 1


@pytest.mark.parametrize("opset,mode,transform", [(10, "avg", None), (16, "max", "half_pixel"),
                                                 (22, "avg", "output_half_pixel"), (22, "max", "output_half_pixel")])
def test_roialign_matches_the_reference(rng, opset, mode, transform):
    attrs = {"mode": mode, "output_height": 3, "output_width": 4, "sampling_ratio": 0, "spatial_scale": 0.5}
    if transform:
        attrs["coordinate_transformation_mode"] = transform
    rois = np.array([[1.0, 2.0, 13.0, 11.0], [0.0, 0.0, 5.0, 3.0], [6.5, 1.5, 18.0, 15.5]], np.float32)
    feeds = {"x": nonzero(rng, (2, 3, 8, 10)), "rois": rois, "b": np.array([1, 0, 1], np.int64)}

    def model_at(opset, attrs):
        return _model([helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], **attrs)],
                      [_vi("x", F, [2, 3, 8, 10]), _vi("rois", F, [3, 4]), _vi("b", TensorProto.INT64, [3])],
                      [_vi("y", F, [3, 3, 3, 4])], opset=opset)

    if opset >= 16:
        _check(model_at(opset, attrs), feeds, rtol=1e-4, atol=1e-5)
        return
    # Opset 10 has no coordinate_transformation_mode; the spec calls 'output_half_pixel' the
    # backward-compatible behaviour (opset 10's). onnx's reference applies opset 16's default to
    # every opset, so the expected values come from its opset-16 model with that mode spelled out.
    (got,) = tob.InferenceSession(model_at(10, attrs)).run(None, feeds)
    (want,) = ReferenceEvaluator(model_at(16, {**attrs, "coordinate_transformation_mode": "output_half_pixel"})).run(
        None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_deform_conv_matches_the_reference(rng):
    n, c, h, w, m, kh, kw = 1, 4, 5, 5, 4, 2, 2
    attrs = {"group": 2, "offset_group": 2, "pads": [1, 1, 1, 1], "strides": [2, 2]}
    oh = ow = (h + 2 - kh) // 2 + 1
    feeds = {"x": nonzero(rng, (n, c, h, w)), "w": nonzero(rng, (m, c // 2, kh, kw)),
             "offset": rng.uniform(-1.5, 1.5, size=(n, 2 * kh * kw * 2, oh, ow)).astype(np.float32),
             "b": nonzero(rng, (m,)), "mask": rng.uniform(0.1, 1.0, size=(n, 2 * kh * kw, oh, ow)).astype(np.float32)}
    model = _model([helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], **attrs)],
                   [_vi(k, F, list(v.shape)) for k, v in feeds.items()], [_vi("y", F, [n, m, oh, ow])])
    _check(model, feeds, rtol=1e-4, atol=1e-5)


def test_tensor_scatter_and_reverse_sequence(rng):
    feeds = {"cache": nonzero(rng, (2, 3, 7, 4)), "update": nonzero(rng, (2, 3, 3, 4)),
             "w": np.array([5, 2], np.int64)}
    model = _model([helper.make_node("TensorScatter", ["cache", "update", "w"], ["y"], mode="circular")],
                   [_vi("cache", F, [2, 3, 7, 4]), _vi("update", F, [2, 3, 3, 4]), _vi("w", TensorProto.INT64, [2])],
                   [_vi("y", F, [2, 3, 7, 4])], opset=24)
    _check(model, feeds, rtol=0, atol=0)
    feeds = {"x": nonzero(rng, (5, 3, 2)), "lens": np.array([5, 1, 3], np.int64)}
    model = _model([helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=1, time_axis=0)],
                   [_vi("x", F, [5, 3, 2]), _vi("lens", TensorProto.INT64, [3])], [_vi("y", F, [5, 3, 2])])
    _check(model, feeds, rtol=0, atol=0)


PREVIEW = "ai.onnx.preview.training"


@pytest.mark.parametrize("op,states,attrs", [
    ("Adagrad", 1, {"decay_factor": 0.1, "epsilon": 1e-4, "norm_coefficient": 0.01}),
    ("Momentum", 1, {"alpha": 0.9, "beta": 0.5, "norm_coefficient": 0.01, "mode": "nesterov"}),
    ("Adam", 2, {"alpha": 0.85, "beta": 0.99, "epsilon": 1e-4, "norm_coefficient": 0.01,
                 "norm_coefficient_post": 0.02}),
])
def test_preview_optimizers_over_two_tensors(rng, op, states, attrs):
    shapes = [(3, 2), (5,)]
    names = ["x0", "x1", "g0", "g1"] + [f"s{k}_{i}" for k in range(states) for i in range(2)]
    feeds = {"R": np.array(0.05, np.float32), "T": np.array(3, np.int64)}
    for name in names:
        shape = shapes[int(name[-1])]
        feeds[name] = (rng.uniform(0.05, 1.0, size=shape) if name.startswith("s") else nonzero(rng, shape))
        feeds[name] = feeds[name].astype(np.float32)
    outs = [f"{p}_new{i}" for p in ["x"] + [f"s{k}" for k in range(states)] for i in range(2)]
    node = helper.make_node(op, ["R", "T"] + names, outs, domain=PREVIEW, **attrs)
    model = _model([node], [_vi("R", F, []), _vi("T", TensorProto.INT64, [])] +
                   [_vi(n, F, list(shapes[int(n[-1])])) for n in names],
                   [_vi(o, F, list(shapes[int(o[-1])])) for o in outs], opset=18, extra_opsets=[(PREVIEW, 1)])
    _check(model, feeds, rtol=1e-5, atol=1e-6)


ML = "ai.onnx.ml"


def test_ml_ops_match_the_reference(rng):
    x = nonzero(rng, (4, 6))
    nodes = [helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["f"], domain=ML),
             helper.make_node("Binarizer", ["f"], ["y"], domain=ML, threshold=0.3)]
    model = _model(nodes, [_vi("x", F, [4, 6]), _vi("i", TensorProto.INT64, [3])], [_vi("y", F, [4, 3])],
                   opset=18, extra_opsets=[(ML, 1)])
    _check(model, {"x": x, "i": np.array([5, 0, 2], np.int64)}, rtol=0, atol=0)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_matches_the_reference(rng, aggregate):
    # Two trees over 2 features, 2 targets; node 1 tests set membership, node 0 tracks NaN to true.
    tensor = helper.make_tensor
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain=ML, n_targets=2, aggregate_function=aggregate, post_transform=0,
        tree_roots=[0, 3],
        nodes_modes=tensor("m", TensorProto.UINT8, [4], [0, 6, 0, 3]),
        nodes_featureids=[0, 1, 0, 1],
        nodes_splits=tensor("s", F, [4], [0.2, 0.0, 0.0, -0.4]),
        nodes_truenodeids=[1, 0, 0, 2], nodes_trueleafs=[0, 1, 1, 1],
        nodes_falsenodeids=[1, 1, 0, 3], nodes_falseleafs=[1, 1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 0],
        membership_values=tensor("mv", F, [4], [1.0, 2.0, 3.0, np.nan]),
        leaf_targetids=[0, 1, 1, 0], leaf_weights=tensor("w", F, [4], [1.5, -2.0, 0.75, 3.25]))
    x = nonzero(rng, (12, 2))
    x[:, 1] = rng.integers(0, 4, size=12)
    x[3, 0] = np.nan
    model = _model([node], [_vi("x", F, [12, 2])], [_vi("y", F, [12, 2])], opset=18, extra_opsets=[(ML, 5)])
    _check(model, {"x": x}, rtol=1e-6, atol=1e-6)
