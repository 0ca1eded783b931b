"""Bad input gets an exception that names the culprit and what was expected: never a crash or a
silently wrong answer. Includes a bounded fuzz of the loader with mutated models."""

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

import torch_ort_backend as tob
from conftest import nonzero
from models import mlp, mlp_reference, single_node


@pytest.fixture
def sess(rng):
    return tob.InferenceSession(mlp(rng))


def test_wrong_dtype_names_input_and_types(sess, rng):
    with pytest.raises(tob.InvalidArgumentError, match=r"input 'x': expected dtype float32, got float64"):
        sess.run(None, {"x": nonzero(rng, (2, 16), np.float64)})


def test_wrong_rank_names_input_and_shapes(sess, rng):
    with pytest.raises(tob.InvalidArgumentError, match=r"input 'x': expected rank 2 .*got shape \[16\]"):
        sess.run(None, {"x": nonzero(rng, (16,))})


def test_wrong_size_names_dimension(sess, rng):
    with pytest.raises(tob.InvalidArgumentError, match=r"input 'x': dimension 1 must be 16.*got shape \[2, 15\]"):
        sess.run(None, {"x": nonzero(rng, (2, 15))})


def test_missing_feed(sess):
    with pytest.raises(tob.InvalidArgumentError, match=r"missing input 'x' \(float32\[batch, 16\]\)"):
        sess.run(None, {})


def test_unknown_feed(sess, rng):
    with pytest.raises(tob.InvalidArgumentError, match=r"unknown input 'y'; the model's inputs are: x"):
        sess.run(None, {"x": nonzero(rng, (1, 16)), "y": nonzero(rng, (1,))})


def test_unknown_output_name(sess, rng):
    with pytest.raises(tob.InvalidArgumentError, match=r"unknown output 'nope'; the model's outputs are: probs, logits"):
        sess.run(["nope"], {"x": nonzero(rng, (1, 16))})


def test_inconsistent_symbolic_dims_across_inputs(rng):
    model = single_node("Add", [("a", TensorProto.FLOAT, ["n"]), ("b", TensorProto.FLOAT, ["n"])],
                        [("c", TensorProto.FLOAT, ["n"])])
    sess = tob.InferenceSession(model)
    with pytest.raises(tob.InvalidArgumentError, match=r"'n'"):
        sess.run(None, {"a": nonzero(rng, (3,)), "b": nonzero(rng, (4,))})


def test_non_contiguous_torch_input_is_made_contiguous(rng):
    model = mlp(rng)
    x = torch.from_numpy(nonzero(rng, (16, 4))).t()  # a transposed view
    (logits,) = tob.InferenceSession(model).run(["logits"], {"x": x})
    expected = torch.from_numpy(mlp_reference(model, x.numpy())["logits"]).float()
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-5)


def test_unsupported_op_names_op_domain_and_opset():
    model = single_node("NoSuchOp", [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])],
                        domain="custom.domain")
    with pytest.raises(tob.NotImplementedOpError, match=r"NoSuchOp.*custom\.domain.*opset 1"):
        tob.InferenceSession(model)


def test_truncated_bytes(rng):
    data = mlp(rng).SerializeToString()
    with pytest.raises(tob.InvalidModelError):
        tob.InferenceSession(data[: len(data) // 2])


def test_dangling_edge(rng):
    model = mlp(rng)
    model.graph.node[2].input[0] = "does_not_exist"
    with pytest.raises(tob.InvalidModelError, match="does_not_exist"):
        tob.InferenceSession(model)


def test_cycle(rng):
    nodes = [helper.make_node("Relu", ["x", ], ["a"], name="r0"),
             helper.make_node("Add", ["a", "c"], ["b"], name="add"),
             helper.make_node("Relu", ["b"], ["c"], name="r1")]
    graph = helper.make_graph(nodes, "cyc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(tob.InvalidModelError):
        tob.InferenceSession(model)


def test_attribute_of_wrong_type(rng):
    model = single_node("Softmax", [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])])
    del model.graph.node[0].attribute[:]
    model.graph.node[0].attribute.append(helper.make_attribute("axis", 1.5))
    with pytest.raises(tob.InvalidModelError, match=r"axis"):
        tob.InferenceSession(model)


def test_string_input_to_an_op_without_string_kernels_is_refused():
    model = single_node("Abs", [("x", TensorProto.STRING, [2])], [("y", TensorProto.STRING, [2])])
    with pytest.raises((tob.NotImplementedOpError, tob.InvalidModelError), match=r"Abs node.*string"):
        tob.InferenceSession(model)


def test_wrong_model_argument_type():
    with pytest.raises(TypeError, match="path, bytes or onnx.ModelProto"):
        tob.InferenceSession(12345)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        tob.InferenceSession(str(tmp_path / "nope.onnx"))


def _mutations(rng, data: bytes, count: int):
    """Byte flips, truncations, splices and duplications of a valid serialized model."""
    for i in range(count):
        b = bytearray(data)
        kind = i % 4
        if kind == 0:
            for _ in range(rng.integers(1, 8)):
                b[rng.integers(len(b))] = rng.integers(256)
        elif kind == 1:
            b = b[: rng.integers(1, len(b))]
        elif kind == 2:
            start, length = rng.integers(len(b)), rng.integers(1, 64)
            b[start:start] = bytes(rng.integers(0, 256, size=length, dtype=np.uint8))
        else:
            start, length = rng.integers(len(b)), rng.integers(1, 128)
            b = b[:start] + b[start:start + length] * 2 + b[start + length:]
        yield bytes(b)


def test_fuzzed_models_raise_or_run_but_never_crash(rng):
    data = mlp(rng, in_dim=4, hidden=6, out_dim=3).SerializeToString()
    outcomes = {"error": 0, "ran": 0}
    for mutated in _mutations(rng, data, 400):
        try:
            sess = tob.InferenceSession(mutated)
            feeds = {}
            for i in sess.get_inputs():
                shape = [d if isinstance(d, int) else 2 for d in (i.shape or [])]
                if np.prod(shape) > 1 << 16:  # a mutated dim: not worth allocating
                    raise ValueError("mutated shape too large to feed")
                feeds[i.name] = np.ones(shape, dtype=np.float32)
            sess.run(None, feeds)
            outcomes["ran"] += 1
        except (tob.EngineError, ValueError, TypeError, NotImplementedError, FileNotFoundError):
            outcomes["error"] += 1
    assert outcomes["error"] > 0  # the mutations did reach the error paths


@pytest.mark.parametrize("op_type, error", [
    ("If", None),
    ("Loop", r"Loop node 'with_subgraph': body takes 0 inputs; a Loop with 0 loop-carried values needs 2"),
    ("Scan", r"Scan node 'with_subgraph': body takes 0 inputs; a Scan with 0 state variables and 1 scan inputs "
             r"needs 1"),
])
def test_malformed_subgraph_bodies_are_refused_naming_node_and_subgraph(op_type, error):
    """A body that reads x from the main graph and takes no inputs: fine as an If branch (which takes
    none), refused as a Loop or Scan body (which take the iteration's values), naming the node."""
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["y_body"])], "body", [],
                             [helper.make_tensor_value_info("y_body", TensorProto.FLOAT, [2])])
    inputs = {"If": ["c"], "Loop": ["", "c"], "Scan": ["x"]}[op_type]
    graph_attrs = ["then_branch", "else_branch"] if op_type == "If" else ["body"]
    extra = {"num_scan_inputs": 1} if op_type == "Scan" else {}
    node = helper.make_node(op_type, inputs, ["y"], name="with_subgraph", **{a: body for a in graph_attrs}, **extra)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    if error is None:
        x = np.array([1.5, -2.0], np.float32)
        (y,) = tob.InferenceSession(model).run(None, {"c": np.array(True), "x": x})
        np.testing.assert_array_equal(y, x)
        return
    with pytest.raises(tob.InvalidModelError, match=error):
        tob.InferenceSession(model)


def test_fuzzed_aten_python_op_and_subgraph_nodes_never_crash():
    """special_node_fuzz.py in a child process (a torch kernel that crashes would take pytest with it):
    ATen nodes of index-taking operators with wild indices and mutated attributes, PythonOp /
    PythonOpGrad nodes with guessed names, constants and contexts, If/Loop/Scan models (nested, with
    values of enclosing graphs) mutated inside their subgraphs (truncated, dangling names, wrong
    arity, cycles, wild attributes, nesting past the limit), sequence / optional / string models with
    mutated value types and string initializers, each also byte-mutated (the subgraph models loaded
    with and without onnx's checker). Every case must raise one of the engine's errors, with a message
    that names what is wrong, or run; the child must exit cleanly."""
    import json
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, os.path.join(here, "special_node_fuzz.py"), "20261122", "300"],
                         capture_output=True, text=True, cwd=here, timeout=600)
    assert out.returncode == 0, f"the fuzz worker died (exit {out.returncode}):\n{out.stderr[-3000:]}"
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["unexpected"] == [], report["unexpected"]
    outcomes = report["outcomes"]
    assert outcomes["aten"].get("OpNotAllowedError", 0) > 0 and outcomes["aten"].get("KernelError", 0) > 0, outcomes
    assert outcomes["aten"].get("ran", 0) > 0, outcomes  # some cases were valid: the fuzz reached the kernels
    assert outcomes["python_op"].get("KernelError", 0) > 0, outcomes
    # Valid control flow runs; the engine's own checks (not only onnx's checker) refuse the rest.
    assert outcomes["subgraph"].get("ran", 0) > 0, outcomes
    assert outcomes["subgraph"].get("InvalidModelError", 0) > 0, outcomes
    assert report["engine_refusals"] > 0, report
    # Sequence, optional and string models: some run, most mutations are refused by name.
    assert outcomes["sequence"].get("ran", 0) > 0, outcomes
    assert sum(n for k, n in outcomes["sequence"].items() if k != "ran") > outcomes["sequence"]["ran"], outcomes
