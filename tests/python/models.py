"""Small ONNX models built with onnx.helper for the Python API tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(rng, in_dim=16, hidden=32, out_dim=8, batch="batch", opset=17) -> onnx.ModelProto:
    """x -> MatMul -> Add -> Relu -> MatMul -> Add -> Softmax, weights as initializers."""
    w1 = numpy_helper.from_array(rng.standard_normal((in_dim, hidden)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((hidden, out_dim)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(out_dim).astype(np.float32), "b2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "b2"], ["logits"], name="bias2"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, in_dim])],
        [
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, out_dim]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, out_dim]),
        ],
        [w1, b1, w2, b2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def mlp_reference(model: onnx.ModelProto, x: np.ndarray) -> dict[str, np.ndarray]:
    """float64 evaluation of mlp()."""
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    h = np.maximum(x.astype(np.float64) @ w["w1"] + w["b1"], 0.0)
    logits = h @ w["w2"] + w["b2"]
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return {"logits": logits, "probs": e / e.sum(axis=-1, keepdims=True)}


def single_node(op_type, inputs, outputs, opset=17, domain="", **attrs) -> onnx.ModelProto:
    """A one-node model; inputs/outputs are (name, elem_type, shape) triples."""
    node = helper.make_node(op_type, [i[0] for i in inputs], [o[0] for o in outputs], domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        op_type.lower(),
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
    )
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def foldable(rng, in_dim=4, out_dim=6) -> onnx.ModelProto:
    """y = relu(x W^T + b)^2 written so that every basic pass has work: an Identity, a Transpose of
    an initializer (constant folding), the same Relu twice (CSE) and an unread Exp (DCE)."""
    w = numpy_helper.from_array(rng.standard_normal((out_dim, in_dim)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(out_dim).astype(np.float32), "b")
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"], name="identity"),
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0], name="transpose_w"),
        helper.make_node("MatMul", ["xi", "wt"], ["h"], name="fc"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
        helper.make_node("Relu", ["hb"], ["r1"], name="relu1"),
        helper.make_node("Relu", ["hb"], ["r2"], name="relu2"),
        helper.make_node("Mul", ["r1", "r2"], ["y"], name="square"),
        helper.make_node("Exp", ["h"], ["unused"], name="unread"),
    ]
    graph = helper.make_graph(nodes, "foldable", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", in_dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", out_dim])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def foldable_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """float64 evaluation of foldable()."""
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    return np.maximum(x.astype(np.float64) @ w["w"].T + w["b"], 0.0) ** 2
