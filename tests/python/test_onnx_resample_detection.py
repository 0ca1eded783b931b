"""Resize, GridSample and NonMaxSuppression inside larger ONNX models, against onnx's reference
implementation (onnx.reference.ReferenceEvaluator): what onnx's one-node tests do not reach.
NonMaxSuppression's output row count depends on the data (its kernel allocates the output), so
a model reading it with another node is run twice with different counts; Resize with constant
scales gets its output shape at load time, and random data exercises modes and dtypes the node
tests leave out."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import torch_ort_backend as tob
from conftest import nonzero


def _model(nodes, inputs, outputs, initializers=(), opset=19):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def _nms_boxes(rng, batches, count):
    """Corner boxes [y1, x1, y2, x2] clustered so that many overlap."""
    centres = rng.uniform(0, 4, size=(batches, count, 2))
    sizes = rng.uniform(0.5, 2.0, size=(batches, count, 2))
    return np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=-1).astype(np.float32)


def test_nms_output_feeds_another_node_and_its_length_varies(rng):
    # selected box indices (column 2) gather the boxes' scores of class 0: [num_selected] floats.
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_min"], ["sel"]),
        helper.make_node("Gather", ["sel", "two"], ["box_index"], axis=1),
        helper.make_node("Gather", ["flat_scores", "box_index"], ["picked"], axis=0),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, None, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, None]),
         helper.make_tensor_value_info("flat_scores", TensorProto.FLOAT, [None]),
         helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, [None, 3]),
         helper.make_tensor_value_info("picked", TensorProto.FLOAT, [None])],
        [numpy_helper.from_array(np.array([5], np.int64), "max_out"),
         numpy_helper.from_array(np.array([0.1], np.float32), "score_min"),
         numpy_helper.from_array(np.array(2, np.int64), "two")],
        opset=11)
    sess = tob.InferenceSession(model)
    ref = ReferenceEvaluator(model)
    lengths = set()
    for count, iou in ((12, 0.3), (30, 0.7), (7, 0.0)):
        boxes = _nms_boxes(rng, 1, count)
        scores = rng.uniform(0, 1, size=(1, 2, count)).astype(np.float32)
        feeds = {"boxes": boxes, "scores": scores, "flat_scores": scores[0, 0],
                 "iou": np.array([iou], np.float32)}
        sel, picked = sess.run(None, feeds)
        ref_sel, ref_picked = ref.run(None, feeds)
        np.testing.assert_array_equal(sel, ref_sel)
        np.testing.assert_array_equal(picked, ref_picked)
        lengths.add(len(sel))
    assert len(lengths) > 1, "the three runs should select different numbers of boxes"


def test_nms_bad_boxes_shape_names_the_input(rng):
    model = _model(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, None, None]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, None])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, [None, 3])], opset=11)
    sess = tob.InferenceSession(model)
    with pytest.raises(Exception, match=r"boxes must be \[num_batches, spatial_dimension, 4\]"):
        sess.run(None, {"boxes": np.ones((1, 3, 5), np.float32), "scores": np.ones((1, 1, 3), np.float32)})


RESIZE_CASES = {
    # name: (attributes, input shape, scales or None, sizes or None, dtype)
    "cubic_antialias_down": ({"mode": "cubic", "antialias": 1}, (2, 3, 9, 7), [1, 1, 0.45, 0.6], None, np.float32),
    "linear_antialias_axes": ({"mode": "linear", "antialias": 1, "axes": [1]}, (2, 11, 3), [0.3], None, np.float32),
    "nearest_ceil_asymmetric": ({"mode": "nearest", "nearest_mode": "ceil",
                                 "coordinate_transformation_mode": "asymmetric"}, (1, 2, 5, 4), None,
                                [1, 2, 8, 9], np.float32),
    "cubic_half_pixel_symmetric_not_smaller": ({"mode": "cubic", "axes": [2, 3],
                                                "keep_aspect_ratio_policy": "not_smaller",
                                                "coordinate_transformation_mode": "half_pixel_symmetric"},
                                               (1, 2, 4, 6), None, [7, 5], np.float32),
    "linear_float64_pytorch_half_pixel": ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
                                          (3, 5), [1.7, 0.4], None, np.float64),
    "linear_uint8": ({"mode": "linear"}, (1, 1, 6, 6), [1, 1, 1.5, 0.7], None, np.uint8),
}


@pytest.mark.parametrize("name", sorted(RESIZE_CASES))
def test_resize_modes_match_the_reference(rng, name):
    attrs, shape, scales, sizes, dtype = RESIZE_CASES[name]
    inits = []
    inputs = ["x", ""]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
        inputs.append("scales")
    else:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        inputs += ["", "sizes"]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model([helper.make_node("Resize", inputs, ["y"], **attrs)],
                   [helper.make_tensor_value_info("x", elem, list(shape))],
                   [helper.make_tensor_value_info("y", elem, [None] * len(shape))], inits)
    if dtype == np.uint8:
        x = rng.integers(0, 256, size=shape).astype(np.uint8)
    else:
        x = nonzero(rng, shape, dtype)
    (y,) = tob.InferenceSession(model).run(None, {"x": x})
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert y.shape == expected.shape and y.dtype == expected.dtype
    if dtype == np.uint8:
        # Both round float64 results half to even; a result within float rounding of .5 may differ by 1.
        assert np.abs(y.astype(int) - expected.astype(int)).max() <= 1
    else:
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_modes_and_padding_match_the_reference(rng, mode, padding):
    # Grid coordinates past [-1, 1] exercise the padding rules; align_corners both ways.
    for align in (0, 1):
        model = _model([helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding,
                                         align_corners=align)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 6]),
                        helper.make_tensor_value_info("grid", TensorProto.FLOAT, [2, 4, 3, 2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 3])], opset=20)
        feeds = {"x": nonzero(rng, (2, 3, 5, 6)),
                 "grid": rng.uniform(-1.4, 1.4, size=(2, 4, 3, 2)).astype(np.float32)}
        (y,) = tob.InferenceSession(model).run(None, feeds)
        (expected,) = ReferenceEvaluator(model).run(None, feeds)
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5, err_msg=f"align_corners={align}")
