"""The data-movement ops on the one-byte float8 types (onnx opset 19+, float8e8m0 24+), checked bit for
bit against onnx's ReferenceEvaluator, with float8 torch tensors in and out through DLPack."""

import ml_dtypes
import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from torch_ort_backend import InferenceSession

# torch dtype, onnx type, ml_dtypes type, the first opset that has the type
FLOAT8 = [
    (torch.float8_e4m3fn, TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, 19),
    (torch.float8_e4m3fnuz, TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz, 19),
    (torch.float8_e5m2, TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2, 19),
    (torch.float8_e5m2fnuz, TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz, 19),
    (torch.float8_e8m0fnu, TensorProto.FLOAT8E8M0, ml_dtypes.float8_e8m0fnu, 24),
]


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


# op name -> (nodes, initializers): x is [2, 3, 7]
def _case(op):
    x = "x"
    if op == "Identity":
        return [helper.make_node("Identity", [x], ["y"])], []
    if op == "Reshape":
        return [helper.make_node("Reshape", [x, "s"], ["y"])], [_i64("s", [7, -1])]
    if op == "Flatten":
        return [helper.make_node("Flatten", [x], ["y"], axis=2)], []
    if op == "Unsqueeze":
        return [helper.make_node("Unsqueeze", [x, "a"], ["y"])], [_i64("a", [0, 3])]
    if op == "Squeeze":
        return [helper.make_node("Unsqueeze", [x, "a"], ["u"]), helper.make_node("Squeeze", ["u", "a"], ["y"])], [
            _i64("a", [1])]
    if op == "Transpose":
        return [helper.make_node("Transpose", [x], ["y"], perm=[2, 0, 1])], []
    if op == "Concat":
        return [helper.make_node("Concat", [x, x], ["y"], axis=1)], []
    if op == "Split":
        return [helper.make_node("Split", [x, "s"], ["y", "z"], axis=2)], [_i64("s", [2, 5])]
    if op == "Slice":
        return [helper.make_node("Slice", [x, "b", "e", "a", "st"], ["y"])], [
            _i64("b", [1, 6]), _i64("e", [3, 0]), _i64("a", [1, 2]), _i64("st", [1, -2])]
    if op == "Gather":
        return [helper.make_node("Gather", [x, "i"], ["y"], axis=2)], [_i64("i", [[6, 0], [3, -1]])]
    if op == "GatherElements":
        return [helper.make_node("GatherElements", [x, "i"], ["y"], axis=1)], [
            _i64("i", np.random.default_rng(1).integers(0, 3, size=(2, 3, 7)))]
    if op == "GatherND":
        return [helper.make_node("GatherND", [x, "i"], ["y"])], [_i64("i", [[1, 2], [0, 0]])]
    if op == "Expand":
        return [helper.make_node("Expand", [x, "s"], ["y"])], [_i64("s", [2, 2, 3, 7])]
    if op == "Tile":
        return [helper.make_node("Tile", [x, "r"], ["y"])], [_i64("r", [1, 2, 3])]
    if op == "Compress":
        return [helper.make_node("Compress", [x, "c"], ["y"], axis=2)], [
            numpy_helper.from_array(np.array([1, 0, 1, 1, 0, 0, 1], dtype=bool), "c")]
    if op == "ReverseSequence":
        return [helper.make_node("ReverseSequence", [x, "l"], ["y"], batch_axis=1, time_axis=0)], [
            _i64("l", [2, 1, 2])]
    if op == "Shape":
        return [helper.make_node("Shape", [x], ["y"])], []
    if op == "Size":
        return [helper.make_node("Size", [x], ["y"])], []
    raise AssertionError(op)


OPS = ["Identity", "Reshape", "Flatten", "Unsqueeze", "Squeeze", "Transpose", "Concat", "Split", "Slice",
       "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Compress", "ReverseSequence", "Shape", "Size"]


def _model(op, onnx_type, opset):
    nodes, inits = _case(op)
    out_type = TensorProto.INT64 if op in ("Shape", "Size") else onnx_type
    graph = helper.make_graph(nodes, f"{op}_float8", [helper.make_tensor_value_info("x", onnx_type, [2, 3, 7])],
                              [helper.make_tensor_value_info(o, out_type, None) for o in nodes[-1].output],
                              initializer=inits)
    # onnx's shape inference fills in the outputs' shapes (the checker wants one).
    return shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind", FLOAT8, ids=lambda k: str(k[0]).removeprefix("torch."))
def test_float8_data_movement_matches_reference(op, kind):
    torch_dtype, onnx_type, ml_type, opset = kind
    model = _model(op, onnx_type, opset)
    # Random bytes, so every code of the format (NaN and the specials included) is moved.
    bits = torch.randint(0, 256, (2, 3, 7), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    x = bits.view(torch_dtype)
    sess = InferenceSession(model.SerializeToString())
    ours = sess.run(None, {"x": x}, as_torch=True)
    ref = ReferenceEvaluator(model).run(None, {"x": bits.numpy().view(ml_type)})
    assert len(ours) == len(ref)
    for got, want in zip(ours, ref):
        want = np.asarray(want)
        assert tuple(got.shape) == want.shape
        if want.dtype == np.int64:  # Shape, Size
            assert got.dtype == torch.int64 and np.array_equal(got.numpy(), want)
        else:
            assert got.dtype == torch_dtype
            np.testing.assert_array_equal(got.view(torch.uint8).numpy(), want.view(np.uint8))


def test_packed_4bit_data_movement_is_refused_by_name():
    """Two int4 elements share a byte, which the byte movers cannot split: the session says so."""
    graph = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], "t",
                              [helper.make_tensor_value_info("x", TensorProto.INT4, [3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.INT4, [5, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(Exception, match=r"(?s)Transpose.*int4"):
        InferenceSession(model.SerializeToString())
