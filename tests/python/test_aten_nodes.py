"""com.microsoft ATen nodes end to end: encode_aten_call (the exporter's encoder) -> a hand-built ONNX
model -> the engine's torch provider, compared with the same op called in eager torch on the same
random inputs. Also the errors (unknown operator, mutable schema, torch failing at run time), the
partition report, views of freed intermediates, and native ops reading ATen outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import torch_ort_backend as tob
from torch_ort_backend._engine import C
from torch_ort_backend.exporter.aten_encoding import AtenEncodingError, encode_aten_call, scalar_type_code

from aten_model_builder import G, ModelBuilder, randn

pytestmark = pytest.mark.skipif(not getattr(C, "built_with_torch", False), reason="built without the torch provider")

aten = torch.ops.aten


def assert_close(actual, expected, **kw):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    torch.testing.assert_close(actual, expected, **kw)


# ---- the ops ----

@pytest.mark.parametrize("mask", [[True, True, True], [True, True, False]])
def test_convolution_backward_tensor_outputs_and_output_mask(mask):
    grad, x, w = randn(2, 4, 5, 5, seed=1), randn(2, 3, 5, 5, seed=2), randn(4, 3, 3, 3, seed=3)
    args = ([4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)
    ref = aten.convolution_backward.default(grad, x, w, *args)
    b = ModelBuilder()
    g, xi, wi = b.input("grad", grad), b.input("x", x), b.input("w", w)
    names = ["gx", "gw", "gb" if mask[2] else None]
    b.aten(aten.convolution_backward.default, (g, xi, wi, *args), outputs=names)
    got = b.run({n: r for n, r in zip(names, ref) if n})
    assert len(got) == sum(mask)
    for a, r in zip(got, ref):
        assert_close(a, r, rtol=1e-5, atol=1e-5)


def test_native_layer_norm_three_outputs():
    x, w, bias = randn(3, 5, 8, seed=4), randn(8, seed=5), randn(8, seed=6)
    ref = aten.native_layer_norm.default(x, [8], w, bias, 1e-5)
    b = ModelBuilder()
    b.aten(aten.native_layer_norm.default, (b.input("x", x), [8], b.input("w", w), b.input("b", bias), 1e-5),
           outputs=["y", "mean", "rstd"])
    got = b.run(dict(zip(["y", "mean", "rstd"], ref)))
    for a, r in zip(got, ref):
        assert_close(a, r, rtol=1e-5, atol=1e-6)


def test_max_pool2d_with_indices_and_its_backward_chained():
    x, g = randn(2, 3, 9, 9, seed=7), randn(2, 3, 4, 4, seed=8)
    r_out, r_idx = aten.max_pool2d_with_indices.default(x, [3, 3], [2, 2])
    r_dx = aten.max_pool2d_with_indices_backward.default(g, x, [3, 3], [2, 2], [0, 0], [1, 1], False, r_idx)
    b = ModelBuilder()
    xi = b.input("x", x)
    out, idx = b.aten(aten.max_pool2d_with_indices.default, (xi, 3, 2), outputs=["out", "idx"],
                      declare=[(torch.float32, [2, 3, 4, 4]), (torch.int64, [2, 3, 4, 4])])
    b.aten(aten.max_pool2d_with_indices_backward.default,
           (b.input("g", g), xi, [3, 3], [2, 2], [0, 0], [1, 1], False, G(idx)), outputs=["dx"])
    # torch's max_pool2d_with_indices_backward does not check the indices, so a loaded model may not
    # call it (test_untrusted_models.py); graphs of our own exporter may, as this session does.
    with pytest.raises(tob.OpNotAllowedError, match=r"max_pool2d_with_indices_backward.*'indices'"):
        b.session({"out": r_out, "idx": r_idx, "dx": r_dx})
    got = b.run({"out": r_out, "idx": r_idx, "dx": r_dx}, allow_unsafe=True)
    for a, r in zip(got, (r_out, r_idx, r_dx)):
        assert_close(a, r)


def test_embedding_dense_backward():
    grad = randn(4, 7, 6, seed=9)
    indices = torch.randint(0, 10, (4, 7), generator=torch.Generator().manual_seed(3))
    ref = aten.embedding_dense_backward.default(grad, indices, 10, 2, False)
    b = ModelBuilder()
    b.aten(aten.embedding_dense_backward.default, (b.input("g", grad), b.input("i", indices), 10, 2, False),
           outputs=["dw"])
    (got,) = b.run({"dw": ref})
    assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_native_dropout_follows_torch_manual_seed():
    x = randn(64, 32, seed=10)
    torch.manual_seed(1234)
    r_y, r_mask = aten.native_dropout.default(x, 0.3, True)
    b = ModelBuilder()
    b.aten(aten.native_dropout.default, (b.input("x", x), 0.3, True), outputs=["y", "mask"])
    sess = b.session({"y": r_y, "mask": r_mask})
    torch.manual_seed(1234)
    y, mask = sess.run(None, b.feeds)
    assert_close(y, r_y)
    assert_close(mask, r_mask)
    assert 0 < mask.sum() < mask.numel()
    y2, _ = sess.run(None, b.feeds)  # the generator moved on: another mask
    assert not torch.equal(y, y2)


def test_scaled_dot_product_flash_attention_for_cpu():
    q, k, v = randn(2, 4, 16, 8, seed=11), randn(2, 4, 16, 8, seed=12), randn(2, 4, 16, 8, seed=13)
    ref = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, is_causal=True)
    b = ModelBuilder()
    b.aten(aten._scaled_dot_product_flash_attention_for_cpu.default,
           (b.input("q", q), b.input("k", k), b.input("v", v)), {"is_causal": True}, outputs=["o", "lse"])
    got = b.run({"o": ref[0], "lse": ref[1]})
    for a, r in zip(got, ref):
        assert_close(a, r, rtol=1e-5, atol=1e-5)


def test_cat_tensor_list():
    parts = [randn(2, n, 3, seed=20 + n) for n in (1, 4, 2)]
    ref = torch.cat(parts, 1)
    b = ModelBuilder()
    b.aten(aten.cat.default, ([b.input(f"p{i}", p) for i, p in enumerate(parts)], 1), outputs=["y"])
    (got,) = b.run({"y": ref})
    assert_close(got, ref)


def test_index_tensor_optional_tensor_list_with_none():
    x = randn(4, 5, 6, seed=14)
    idx = torch.tensor([4, 0, 2, 2])
    ref = aten.index.Tensor(x, [None, idx])
    b = ModelBuilder()
    b.aten(aten.index.Tensor, (b.input("x", x), [None, b.input("i", idx)]), outputs=["y"])
    (got,) = b.run({"y": ref})
    assert_close(got, ref)


def test_str_argument_gelu_tanh():
    x = randn(3, 7, seed=15)
    ref = aten.gelu.default(x, approximate="tanh")
    b = ModelBuilder()
    b.aten(aten.gelu.default, (b.input("x", x),), {"approximate": "tanh"}, outputs=["y"])
    (got,) = b.run({"y": ref})
    assert_close(got, ref)
    assert not torch.allclose(got, aten.gelu.default(x)), "the str argument must reach torch"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.bool])
def test_scalar_type_argument_to_copy(dtype):
    x = randn(4, 3, seed=16)
    b = ModelBuilder()
    b.aten(aten._to_copy.default, (b.input("x", x),), {"dtype": dtype}, outputs=["y"])
    (got,) = b.run({"y": x.to(dtype)})
    assert_close(got, x.to(dtype))


def test_scalar_type_codes_are_torchs():
    assert scalar_type_code(torch.float32) == 6
    assert scalar_type_code(torch.bfloat16) == 15
    assert scalar_type_code(torch.bool) == 11


def test_scalar_arguments_add_scalar_clamp_and_alpha():
    x, y = randn(5, 4, seed=17), randn(5, 4, seed=18)
    refs = {"a": aten.add.Scalar(x, 2.5), "c": aten.clamp.default(x, min=-0.5, max=1),
            "t": aten.add.Tensor(x, y, alpha=3), "i": torch.arange(6) + 1}
    b = ModelBuilder()
    xi, yi = b.input("x", x), b.input("y", y)
    b.aten(aten.add.Scalar, (xi, 2.5), outputs=["a"])
    b.aten(aten.clamp.default, (xi,), {"min": -0.5, "max": 1}, outputs=["c"])
    b.aten(aten.add.Tensor, (xi, yi), {"alpha": 3}, outputs=["t"])
    b.aten(aten.add.Scalar, (b.input("n", torch.arange(6)), True), outputs=["i"])
    got = b.run(refs)
    for a, r in zip(got, refs.values()):
        assert_close(a, r)


def test_ops_returning_int_and_scalar():
    x = randn(3, 7, seed=19)
    b = ModelBuilder()
    xi = b.input("x", x, symbolic=True)
    b.aten(aten.sym_size.int, (xi, 1), outputs=["n"])
    b.aten(aten._local_scalar_dense.default, (b.input("s", torch.tensor(2.75, dtype=torch.float64)),), outputs=["v"])
    n, v = b.run({"n": torch.tensor(0), "v": torch.tensor(0.0, dtype=torch.float64)})
    assert n.dim() == 0 and n.dtype == torch.int64 and n.item() == 7
    assert v.dim() == 0 and v.dtype == torch.float64 and v.item() == 2.75


def test_int_list_mixing_static_ints_and_graph_symints():
    x = randn(6, 4, seed=21)
    b = ModelBuilder()
    b.aten(aten.view.default, (b.input("x", x), [G("rows"), -1]), outputs=["y"])
    b.input("rows", torch.tensor(3))
    (got,) = b.run({"y": x.view(3, -1)})
    assert_close(got, x.view(3, -1))


def test_view_of_an_intermediate_outlives_it_and_graph_output_views_are_copied():
    x = randn(4, 6, seed=22)
    b = ModelBuilder()
    b.input("x", x)
    (neg,) = b.node("Neg", ["x"])
    # 'neg' is last read by the ATen view: the engine lets go of it there, torch's view keeps it.
    (flat,) = b.aten(aten.view.default, (G(neg), [-1]), declare=[(torch.float32, ["numel"])])
    (e,) = b.node("Exp", ["x"])  # same size as 'neg': would land on its memory if it were freed
    (e_flat,) = b.node("Reshape", [e, b.const(np.array([-1]))])
    (y,) = b.node("Add", [flat, e_flat])
    b.aten(aten.slice.Tensor, (G(e), 0, 1, 3), outputs=["rows"])  # a graph output viewing an intermediate
    b.aten(aten.alias.default, (G("x"),), outputs=["same"])  # a graph output viewing the caller's input
    sess = b.session({y: x.view(-1), "rows": x, "same": x})
    sess.run(None, {"x": torch.zeros_like(x)})  # records the memory plan
    first = sess.run(None, b.feeds)  # planned: intermediates live in the arena...
    second = sess.run(None, {"x": x * 2})  # ...which this run reuses
    assert sess.last_run_stats()["planned"]
    assert_close(first[0], (-x).view(-1) + x.exp().view(-1))
    assert_close(first[1], x.exp()[1:3])
    assert_close(second[0], (-2 * x).view(-1) + (2 * x).exp().view(-1))
    assert_close(second[1], (2 * x).exp()[1:3])
    assert_close(first[2], x)
    assert first[2].data_ptr() == b.feeds["x"].data_ptr()


def test_aten_output_feeds_native_ops_without_declared_shapes():
    x = randn(3, 5, seed=23)
    ref = torch.softmax(torch.relu(aten.gelu.default(x)), -1)
    b = ModelBuilder()
    (g,) = b.aten(aten.gelu.default, (b.input("x", x, symbolic=True),))  # no value_info at all
    (r,) = b.node("Relu", [g])
    (s,) = b.node("Softmax", [r], axis=-1)
    (got,) = b.run({s: ref})
    assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_partition_report_names_the_torch_provider():
    x = randn(2, 2)
    b = ModelBuilder()
    (g,) = b.aten(aten.gelu.default, (b.input("x", x),), name="my_gelu")
    (r,) = b.node("Relu", [g])
    report = b.session({r: x}).partition_report()
    line = next(line for line in report.splitlines() if line.startswith("my_gelu"))
    assert "com.microsoft::ATen" in line and C.TORCH_PROVIDER in line, report
    assert C.TORCH_PROVIDER in C.fallback_providers()


# ---- errors ----

def single_node_model(attrs: dict, inputs=("x",), outputs=("y",)) -> onnx.ModelProto:
    node = helper.make_node("ATen", list(inputs), list(outputs), domain="com.microsoft", name="bad", **attrs)
    graph = helper.make_graph(
        [node], "bad", [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2, 3]) for i in inputs if i],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["d0", "d1"]) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])


def test_unknown_operator_is_not_implemented_naming_it():
    # Looked up before the allow-list is consulted: an unknown name is NotImplemented in every session.
    with pytest.raises(tob.NotImplementedOpError, match=r"ATen node 'bad'.*aten::no_such_op\.foo"):
        tob.InferenceSession(single_node_model({"operator": "no_such_op", "overload_name": "foo"}))
    with pytest.raises(tob.NotImplementedOpError, match=r"mylib::missing"):
        tob.InferenceSession(single_node_model({"operator": "mylib::missing"}))


def test_mutable_schema_is_rejected_by_encoder_and_engine():
    with pytest.raises(AtenEncodingError, match=r"aten\.relu_\.default.*'self' is mutated"):
        encode_aten_call(aten.relu_.default, (G("x"),), {})
    with pytest.raises(tob.InvalidModelError, match=r"ATen node 'bad'.*aten::relu_ mutates its argument 'self'"):
        tob.InferenceSession(single_node_model({"operator": "relu_"}))


def test_torch_error_at_run_time_names_node_and_operator():
    model = single_node_model({"operator": "mm"}, inputs=("x", "w"))
    sess = tob.InferenceSession(model)
    with pytest.raises(tob.KernelError, match=r"ATen node 'bad'.*torch operator aten::mm failed.*") as info:
        sess.run(None, {"x": torch.ones(2, 3), "w": torch.ones(2, 3)})
    assert isinstance(info.value, tob.EngineError)
    assert "Traceback" not in str(info.value) and "Exception raised from" not in str(info.value)


def test_bad_argument_encoding_is_a_clear_error():
    # add.Tensor's alpha is a Scalar: a 1-D tensor is not one.
    nodes = [helper.make_node("ATen", ["x", "x", "alpha"], ["y"], domain="com.microsoft", name="bad",
                              operator="add", overload_name="Tensor")]
    graph = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
                              [numpy_helper.from_array(np.array([1.0, 2.0]), "alpha")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    sess = tob.InferenceSession(model)
    with pytest.raises(tob.KernelError, match=r"argument 'alpha' \(Scalar\): expected a 0-d tensor, got shape \[2\]"):
        sess.run(None, {"x": np.ones(2, np.float32)})


def test_too_many_inputs_and_missing_list_lengths_are_invalid_models():
    with pytest.raises(tob.InvalidModelError, match=r"3 inputs but aten::relu takes 1"):
        tob.InferenceSession(single_node_model({"operator": "relu"}, inputs=("x", "y0", "z0")))
    with pytest.raises(tob.InvalidModelError, match=r"tensor_list_lengths"):
        tob.InferenceSession(single_node_model({"operator": "cat"}))


def test_encoder_errors_name_op_and_argument():
    with pytest.raises(AtenEncodingError, match=r"aten\.gelu\.default: argument 'approximate' \(str\): expected a str"):
        encode_aten_call(aten.gelu.default, (G("x"),), {"approximate": 3})
    with pytest.raises(AtenEncodingError, match=r"required argument 'tensors'"):
        encode_aten_call(aten.cat.default, (), {})
    with pytest.raises(AtenEncodingError, match=r"unknown keyword argument 'nope'"):
        encode_aten_call(aten.relu.default, (G("x"),), {"nope": 1})
    with pytest.raises(AtenEncodingError, match=r"explicit Generator"):
        encode_aten_call(aten.bernoulli.default, (G("x"),), {"generator": torch.Generator()})
