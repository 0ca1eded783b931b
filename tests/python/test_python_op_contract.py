"""The PythonOp / PythonOpGrad node contract and its security rule, on hand-built ONNX models run
by the engine: a node runs only a Function registered in this process (a name it never registered
is an error, and nothing is imported by that name), constant arguments decode from the file alone
while object references resolve only in the process that made them, malformed nodes are errors
naming the node, and the models the backend saves carry the documented attributes."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import python_op_functions as fns
import torch_ort_backend as tob
from python_op_harness import assert_engine_ran_since, compile_ort, engine_counters, random_input
from torch_ort_backend._engine import C
from torch_ort_backend.autograd_function import (qualified_name, register_function,
                                                  register_function_for_loaded_models)
from torch_ort_backend.autograd_function.registry import decode_constants, encode_constants

pytestmark = pytest.mark.skipif(not getattr(C, "built_with_torch", False), reason="built without the torch provider")


def python_op_model(func_name: str, *, convention: str = "d", constants: str = "[]", requires=None,
                    node_inputs=("x",), shape=(4,), grad: bool = False) -> onnx.ModelProto:
    """x -> PythonOp -> y (and, with grad, PythonOpGrad(ctx, dy) -> dx)."""
    attrs = dict(func_name=func_name, input_convention=convention, constant_args=constants)
    if requires is not None:
        attrs["input_requires_grads"] = requires
    nodes = [helper.make_node("PythonOp", list(node_inputs), ["ctx", "y"], domain="com.microsoft", name="fwd",
                              **attrs)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))]
    if grad:
        nodes.append(helper.make_node("PythonOpGrad", ["ctx", "dy"], ["dx"], domain="com.microsoft", name="bwd",
                                      func_name=func_name, input_requires_grads=[1]))
        inputs.append(helper.make_tensor_value_info("dy", TensorProto.FLOAT, list(shape)))
        outputs.append(helper.make_tensor_value_info("dx", TensorProto.FLOAT, list(shape)))
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def run(model: onnx.ModelProto, **feeds: np.ndarray) -> list[np.ndarray]:
    return tob.InferenceSession(model).run(None, feeds)


def test_registered_function_runs_forward_and_backward():
    name = register_function(fns.CustomGelu)
    x = random_input((4,), seed=1).numpy()
    dy = random_input((4,), seed=2).numpy()
    y, dx = run(python_op_model(name, requires=[1], grad=True), x=x, dy=dy)
    xt = torch.from_numpy(x).requires_grad_()
    ref = fns.CustomGelu.apply(xt)
    ref.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(y, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_constants_decode_from_the_file():
    name = register_function(fns.Mixed)
    constants = encode_constants([0.5, 2, (1, 1.5), True, "neg", None, torch.float32])
    model = python_op_model(name, convention="cdcdccccc", constants=constants, node_inputs=("x", "x"))
    x = random_input((4,), seed=3).numpy()
    (y,) = run(model, x=x)
    xt = torch.from_numpy(x)
    ref = fns.Mixed.apply(0.5, xt, 2, xt, (1, 1.5), True, "neg", None, torch.float32)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-6)


def test_unregistered_name_is_an_error_and_never_imported():
    sentinel = "python_op_sentinel_module_never_imported"
    with pytest.raises(Exception, match="not registered in this process"):
        run(python_op_model(f"{sentinel}.Evil"), x=np.ones(4, np.float32))
    with pytest.raises(Exception, match="not registered in this process"):
        run(python_op_model("os.system"), x=np.ones(4, np.float32))
    assert sentinel not in sys.modules


def test_object_references_resolve_only_in_this_process():
    class Config:
        factor = 2.5

    config = Config()
    name = register_function(fns.ScaleByObject)
    x = random_input((4,), seed=4).numpy()
    (y,) = run(python_op_model(name, convention="dc", constants=encode_constants([config])), x=x)
    np.testing.assert_allclose(y, x * 2.5, rtol=1e-6)
    # Object references are random tokens: another token, or a small integer as the ids once were,
    # refers to nothing.
    missing = json.dumps([{"object": secrets.token_hex(16)}])
    with pytest.raises(Exception, match="does not exist in this process"):
        run(python_op_model(name, convention="dc", constants=missing), x=x)
    with pytest.raises(Exception, match="malformed PythonOp constant"):
        run(python_op_model(name, convention="dc", constants=json.dumps([{"object": 1}])), x=x)
    with pytest.raises(Exception, match="malformed PythonOp constant"):
        decode_constants('[{"import": "os.system"}]')


@pytest.mark.parametrize("mutate,match", [
    (lambda n: n.ClearField("attribute"), "func_name"),
    (lambda n: n.attribute.extend([helper.make_attribute("input_convention", 3)]) or
     _drop(n, "input_convention", keep_last=True), "input_convention"),
    (lambda n: _set(n, "input_convention", "dd"), "input_convention"),
    (lambda n: _set(n, "constant_args", "not json"), "JSON"),
])
def test_malformed_nodes_are_errors(mutate, match):
    name = register_function(fns.CustomGelu)
    model = python_op_model(name)
    mutate(model.graph.node[0])
    with pytest.raises(Exception, match=match):
        run(model, x=np.ones(4, np.float32))


def test_backward_without_a_forward_context_is_an_error():
    name = register_function(fns.CustomGelu)
    graph = helper.make_graph(
        [helper.make_node("PythonOpGrad", ["ctx", "dy"], ["dx"], domain="com.microsoft", func_name=name,
                          input_requires_grads=[1])], "g",
        [helper.make_tensor_value_info("ctx", TensorProto.INT64, []),
         helper.make_tensor_value_info("dy", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("dx", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.microsoft", 1)], ir_version=10)
    with pytest.raises(Exception, match="does not exist"):
        run(model, ctx=np.array(123456, np.int64), dy=np.ones(4, np.float32))


def test_same_qualified_name_twice_gets_a_distinct_name():
    """Names for loaded models are qualified names, so two classes of one name need telling apart;
    the names of compiled Functions carry a random token and never collide."""
    def make():
        class Local(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x + 1

            @staticmethod
            def backward(ctx, g):
                return g

        return Local

    first, second = register_function_for_loaded_models(make()), register_function_for_loaded_models(make())
    assert second == first + "#2"
    private_first, private_second = register_function(make()), register_function(make())
    assert private_first != private_second
    assert private_first.split("@")[0] == private_second.split("@")[0] == first


def test_saved_models_carry_the_contract(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")

    def fn(x):
        values, index, _ = fns.TopValueAndIndex.apply(x)
        return values * 2, index

    compiled = compile_ort(fn, save_onnx=True, onnx_prefix="pyop", save_path=str(tmp_path))
    counters = engine_counters()
    compiled(random_input((3, 5), requires_grad=True, seed=5))[0].sum().backward()
    assert_engine_ran_since(counters)
    fw = onnx.load(str(next(tmp_path.glob("pyop_forward_*_exported.onnx"))))
    bw = onnx.load(str(next(tmp_path.glob("pyop_backward_*_exported.onnx"))))
    (node,) = [n for n in fw.graph.node if n.op_type == "PythonOp"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert node.domain == "com.microsoft" and len(node.output) == 4  # context + three outputs
    # The compiled Function's private name: its qualified name and this process's random token.
    base, token = attrs["func_name"].decode().split("@")
    assert base == qualified_name(fns.TopValueAndIndex) and len(token) == 32
    assert attrs["input_convention"] == b"d" and attrs["input_requires_grads"] == [1]
    assert attrs["non_differentiable_outputs"] == [1, 2]
    (grad,) = [n for n in bw.graph.node if n.op_type == "PythonOpGrad"]
    assert grad.domain == "com.microsoft" and len(grad.output) == 1 and grad.input[0]
    onnx.checker.check_model(fw)
    onnx.checker.check_model(bw)


def _set(node, key, value):
    for a in node.attribute:
        if a.name == key:
            node.attribute.remove(a)
            break
    node.attribute.extend([helper.make_attribute(key, value)])


def _drop(node, key, keep_last=False):
    matches = [a for a in node.attribute if a.name == key]
    for a in matches[:-1] if keep_last else matches:
        node.attribute.remove(a)


def test_saved_model_in_a_fresh_process_runs_only_registered_functions(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")

    def fn(x):
        return fns.CustomGelu.apply(x * 2)

    counters = engine_counters()
    compile_ort(fn, save_onnx=True, onnx_prefix="fresh", save_path=str(tmp_path))(random_input((4,), seed=6))
    assert_engine_ran_since(counters)
    (path,) = tmp_path.glob("fresh_inference_*_exported.onnx")
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import onnx
        import torch
        import torch_ort_backend as tob
        model = onnx.load({str(path)!r})
        feeds = {{i.name: np.full([d.dim_value for d in i.type.tensor_type.shape.dim], 0.5, np.float32)
                  for i in model.graph.input}}
        try:
            tob.InferenceSession(model).run(None, feeds)
            print("RAN")
        except Exception as e:
            print("REFUSED", "not registered in this process" in str(e))
        print("IMPORTED", "python_op_functions" in sys.modules)
        import python_op_functions
        tob.register_autograd_function(python_op_functions.CustomGelu)
        (y,) = tob.InferenceSession(model).run(None, feeds)
        ref = python_op_functions.CustomGelu.apply(torch.full(y.shape, 1.0))
        print("MATCH", np.allclose(y, ref.numpy(), rtol=1e-5))
    """)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(__file__))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.split(" ")[0] in ("RAN", "REFUSED", "IMPORTED", "MATCH")]
    assert lines == ["REFUSED True", "IMPORTED False", "MATCH True"], out.stdout + out.stderr
