"""InferenceSession: numpy and torch in and out, IO metadata, options, profiling, saved
optimised model, memory plan. References: float64 numpy and onnxruntime."""

import json
import os

import numpy as np
import onnx
import pytest
import torch

import torch_ort_backend as tob
from conftest import nonzero
from models import foldable, foldable_reference, mlp, mlp_reference


def test_numpy_in_numpy_out_matches_float64(rng):
    model = mlp(rng)
    sess = tob.InferenceSession(model)
    x = nonzero(rng, (5, 16))
    probs, logits = sess.run(None, {"x": x})
    ref = mlp_reference(model, x)
    assert isinstance(probs, np.ndarray) and probs.dtype == np.float32
    np.testing.assert_allclose(logits, ref["logits"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(probs, ref["probs"], rtol=1e-4, atol=1e-6)


def test_torch_in_torch_out_matches_float64(rng):
    model = mlp(rng)
    sess = tob.InferenceSession(model.SerializeToString())
    x = torch.from_numpy(nonzero(rng, (3, 16)))
    (logits,) = sess.run(["logits"], {"x": x})
    assert isinstance(logits, torch.Tensor) and logits.dtype == torch.float32
    np.testing.assert_allclose(logits.numpy(), mlp_reference(model, x.numpy())["logits"], rtol=1e-4, atol=1e-5)


def test_model_from_path(rng, tmp_path):
    model = mlp(rng)
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    x = nonzero(rng, (2, 16))
    out = tob.InferenceSession(str(path)).run(["probs"], {"x": x})[0]
    np.testing.assert_allclose(out, mlp_reference(model, x)["probs"], rtol=1e-4, atol=1e-6)


def test_outputs_share_engine_memory_without_copy(rng):
    # The torch tensor we return views the engine's buffer: same address as the engine tensor.
    model = mlp(rng)
    sess = tob.InferenceSession(model)
    raw = sess._session.run(["x"], [nonzero(rng, (2, 16))], ["logits"])[0]
    t = torch.from_dlpack(raw)
    assert t.data_ptr() == raw.data_ptr()


def test_graph_input_passthrough_is_a_copy(rng):
    # An output that is a graph input is a new value (ONNX), not the fed buffer: changing it in
    # place leaves the caller's input as it was (docs/architecture.md, "Outputs never share the
    # caller's or the model's memory").
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    graph = onnx.helper.make_graph(
        [node], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4]),
         onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
    )
    sess = tob.InferenceSession(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]))
    x = torch.from_numpy(nonzero(rng, (4,)))
    x_before = x.clone()
    y, x_out = sess.run(None, {"x": x})
    assert x_out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(x_out, x_before)
    torch.testing.assert_close(y, torch.relu(x_before))
    x_out.mul_(3)
    torch.testing.assert_close(x, x_before)


def test_symbolic_batch_serves_every_size(rng):
    model = mlp(rng)
    sess = tob.InferenceSession(model)
    for batch in (1, 7, 64):
        x = nonzero(rng, (batch, 16))
        np.testing.assert_allclose(sess.run(["logits"], {"x": x})[0], mlp_reference(model, x)["logits"],
                                   rtol=1e-4, atol=1e-5)


def test_get_inputs_and_outputs(rng):
    sess = tob.InferenceSession(mlp(rng))
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.type, inp.shape) == ("x", "tensor(float)", ["batch", 16])
    outs = sess.get_outputs()
    assert [o.name for o in outs] == ["probs", "logits"]
    assert outs[0].shape == ["batch", 8]
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_matches_onnxruntime(rng):
    ort = pytest.importorskip("onnxruntime")
    model = mlp(rng, in_dim=64, hidden=128, out_dim=10)
    x = nonzero(rng, (8, 64))
    ours = tob.InferenceSession(model).run(None, {"x": x})
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_default_thread_count_follows_torch(rng):
    sess = tob.InferenceSession(mlp(rng))
    assert sess._session.num_threads() == torch.get_num_threads()
    opts = tob.SessionOptions()
    opts.intra_op_num_threads = 1
    assert tob.InferenceSession(mlp(rng), opts)._session.num_threads() == 1


def test_optimization_levels_agree_with_float64(rng):
    """Every level matches the float64 reference, on a model where the basic passes have work: the
    levels did build different graphs (ORT_DISABLE_ALL applies nothing)."""
    model = foldable(rng)
    x = nonzero(rng, (4, 4))
    want = foldable_reference(model, x)
    applied = {}
    for level in tob.GraphOptimizationLevel:
        opts = tob.SessionOptions()
        opts.graph_optimization_level = level
        sess = tob.InferenceSession(model, opts)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6, err_msg=level.name)
        applied[level] = " ".join(sess.applied_passes())
    assert applied[tob.GraphOptimizationLevel.ORT_DISABLE_ALL] == ""
    for pass_name in ("ConstantFolding", "IdentityElimination", "CommonSubexpressionElimination", "DeadCodeElimination"):
        assert pass_name in applied[tob.GraphOptimizationLevel.ORT_ENABLE_ALL], applied


def test_profiling_writes_chrome_trace(rng, tmp_path):
    opts = tob.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof")
    # Level 2: the model's own ops run (level 99 runs the bias Add and the Relu as one FusedElementwise).
    opts.graph_optimization_level = tob.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    sess = tob.InferenceSession(mlp(rng), opts)
    sess.run(None, {"x": nonzero(rng, (2, 16))})
    path = sess.end_profiling()
    assert os.path.isfile(path)
    events = json.load(open(path))
    node_events = [e for e in events if e["cat"] == "Node"]
    assert {e["args"]["op_type"] for e in node_events} >= {"MatMul", "Relu", "Softmax"}
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)


def test_optimized_model_is_saved_and_equivalent(rng, tmp_path):
    """The saved optimised model is the smaller graph the passes made, and it and the source both
    match the float64 reference."""
    model = foldable(rng)
    opts = tob.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "opt.onnx")
    x = nonzero(rng, (3, 4))
    want = foldable_reference(model, x)
    (expected,) = tob.InferenceSession(model, opts).run(None, {"x": x})
    saved = onnx.load(opts.optimized_model_filepath)
    onnx.checker.check_model(saved)
    assert all(p.key == "provider" for n in saved.graph.node for p in n.metadata_props)
    assert len(saved.graph.node) < len(model.graph.node), [n.op_type for n in saved.graph.node]
    (again,) = tob.InferenceSession(saved).run(None, {"x": x})
    np.testing.assert_allclose(expected, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(again, want, rtol=1e-5, atol=1e-6)


def test_second_run_uses_the_memory_plan(rng):
    model = mlp(rng, hidden=256)
    sess = tob.InferenceSession(model)
    x = nonzero(rng, (32, 16))
    first = sess.run(None, {"x": x})
    s1 = sess.last_run_stats()
    second = sess.run(None, {"x": x})
    s2 = sess.last_run_stats()
    assert not s1["planned"] and s2["planned"] and s2["plan_misses"] == 0
    assert s1["peak_bytes"] > 0 and s2["arena_bytes"] >= s2["peak_bytes"]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    # ...and both are right, not only equal (float64 reference).
    ref = mlp_reference(model, x)
    np.testing.assert_allclose(second[1], ref["logits"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(second[0], ref["probs"], rtol=1e-4, atol=1e-6)
    # A new shape records a new plan instead of misusing the old one.
    x5 = nonzero(rng, (5, 16))
    (probs5, _) = sess.run(None, {"x": x5})
    assert not sess.last_run_stats()["planned"]
    np.testing.assert_allclose(probs5, mlp_reference(model, x5)["probs"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("intra_op_num_threads", -1, "intra_op_num_threads"),
        ("intra_op_num_threads", 1.5, "intra_op_num_threads"),
        ("graph_optimization_level", 5, "ORT_ENABLE_ALL"),
        ("enable_profiling", "yes", "enable_profiling"),
        ("no_such_option", 1, "no option 'no_such_option'"),
    ],
)
def test_session_options_are_validated(name, value, message):
    opts = tob.SessionOptions()
    with pytest.raises((ValueError, AttributeError), match=message):
        setattr(opts, name, value)


def test_unknown_provider_is_rejected(rng):
    with pytest.raises(ValueError, match="NoSuchExecutionProvider"):
        tob.InferenceSession(mlp(rng), providers=["NoSuchExecutionProvider"])


@pytest.mark.parametrize("dtype", [onnx.TensorProto.FLOAT, onnx.TensorProto.INT64])
def test_optimized_model_keeps_tensor_attributes(rng, tmp_path, dtype):
    """A node with a tensor attribute (ConstantOfShape's value, which the input's shape keeps from
    being folded) is written back with that value and type."""
    from onnx import helper

    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    fill = np.array([3], dtype=np_type)
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("ConstantOfShape", ["s"], ["y"], value=onnx.numpy_helper.from_array(fill, "v"))],
        "fill", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", dtype, ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = tob.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "opt.onnx")
    x = nonzero(rng, (3, 4))
    (got,) = tob.InferenceSession(model, opts).run(None, {"x": x})
    np.testing.assert_array_equal(got, np.full((3, 4), 3, dtype=np_type))
    saved = onnx.load(opts.optimized_model_filepath)
    (node,) = [n for n in saved.graph.node if n.op_type == "ConstantOfShape"]
    value = onnx.numpy_helper.to_array(node.attribute[0].t)
    assert value.dtype == np_type and value.tolist() == [3]
    (again,) = tob.InferenceSession(saved).run(None, {"x": x})
    np.testing.assert_array_equal(again, got)
