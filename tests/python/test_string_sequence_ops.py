"""String tensors, sequences and optionals end to end through InferenceSession, against onnx's
ReferenceEvaluator (and onnxruntime where the reference departs from the spec: StringNormalizer),
on random data: the string ops, TfIdfVectorizer's string form (pool_strings), Cast to and from string, the data-movement ops on strings, the
Sequence* and Optional* ops, the Python forms of the values (numpy object arrays of str, lists,
None), saving the optimised model, and the errors bad feeds and models get. onnx's backend node
tests (test_onnx_conformance.py) check the suite's fixed cases; the C++ side is
tests/cpp/string_ops_test.cc and sequence_ops_test.cc."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import torch_ort_backend as tob

LETTERS = ["a", "b", "c", "Z", "é", "€", " ", "ab"]


def _words(rng, shape, max_len=5) -> np.ndarray:
    n = int(np.prod(shape))
    words = ["".join(rng.choice(LETTERS, size=rng.integers(0, max_len + 1))) for _ in range(n)]
    arr = np.empty(n, dtype=object)
    arr[:] = words
    return arr.reshape(shape)


def _tensor_info(name, value):
    if isinstance(value, np.ndarray) and value.dtype == object:
        return helper.make_tensor_value_info(name, TensorProto.STRING, list(value.shape))
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype),
                                         list(np.shape(value)))


def _model(nodes, inputs, outputs, opset=21, ml_opset=None, initializers=()) -> onnx.ModelProto:
    """The model; graph outputs declared without a shape get the one onnx's shape inference gives
    (onnx.checker wants a shape on every tensor output), with its unknown dims left unnamed."""
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    if ml_opset:
        opsets.append(helper.make_opsetid("ai.onnx.ml", ml_opset))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    inferred = {o.name: o for o in onnx.shape_inference.infer_shapes(model).graph.output}
    for out in model.graph.output:
        if out.type.HasField("tensor_type") and not out.type.tensor_type.HasField("shape"):
            found = inferred[out.name].type.tensor_type
            assert found.HasField("shape"), f"onnx infers no shape for output '{out.name}'"
            out.type.tensor_type.shape.CopyFrom(found.shape)
    return model


def _one_node(node, feeds: dict, out_types: list, opset=21, ml_opset=None) -> onnx.ModelProto:
    """A one-node model over `feeds` (tensors); out_types: (name, elem type) with unknown shapes."""
    inputs = [_tensor_info(k, v) for k, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(n, t, None) for n, t in out_types]
    return _model([node], inputs, outputs, opset, ml_opset)


def _assert_same(got, want, what=""):
    """Equal values: arrays (strings compared as str, floats exactly or NaN where NaN), lists of
    them, None."""
    if want is None:
        assert got is None, what
        return
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{what}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{what}[{i}]")
        return
    want = np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    if want.dtype.kind in "OUS":
        assert got.dtype == object, f"{what}: dtype {got.dtype}"
        assert [str(x) for x in got.flat] == [str(x) for x in want.flat], f"{what}: {got!r} vs {want!r}"
        return
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs {want.dtype}"
    np.testing.assert_array_equal(got, want, err_msg=what)


def _check_against_reference(model, feeds):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = tob.InferenceSession(model).run(None, feeds)
    for i, (g, w) in enumerate(zip(got, want)):
        _assert_same(g, w, f"output {i}")
    return got


# ---- string ops ---------------------------------------------------------------------------------


@pytest.mark.parametrize("a_shape, b_shape", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((), (2, 2))])
def test_string_concat_and_equal_broadcast(rng, a_shape, b_shape):
    a, b = _words(rng, a_shape, 2), _words(rng, b_shape, 2)
    for op, out_type in (("StringConcat", TensorProto.STRING), ("Equal", TensorProto.BOOL)):
        model = _one_node(helper.make_node(op, ["a", "b"], ["y"]), {"a": a, "b": b}, [("y", out_type)])
        _check_against_reference(model, {"a": a, "b": b})


@pytest.mark.parametrize("attrs", [{}, {"delimiter": "a"}, {"delimiter": " "}, {"maxsplit": 1},
                                   {"delimiter": "b", "maxsplit": 2}, {"delimiter": "ab"}])
def test_string_split(rng, attrs):
    x = _words(rng, (4, 5), 8)
    model = _one_node(helper.make_node("StringSplit", ["x"], ["y", "n"], **attrs), {"x": x},
                      [("y", TensorProto.STRING), ("n", TensorProto.INT64)])
    _check_against_reference(model, {"x": x})


# Patterns on which RE2 (ours, onnxruntime's) and Python's re (the reference's) agree.
@pytest.mark.parametrize("pattern", ["[abc]*", "(a|Z)+b?.*", "é.", "[^ ]+", "a{1,2}b*", ""])
def test_regex_full_match(rng, pattern):
    x = _words(rng, (6, 7), 4)
    model = _one_node(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern), {"x": x},
                      [("y", TensorProto.BOOL)])
    _check_against_reference(model, {"x": x})


@pytest.mark.parametrize("attrs, shape", [
    ({"stopwords": ["ab", "Z"]}, (9,)),
    ({"stopwords": ["ab", "z"], "case_change_action": "UPPER"}, (1, 9)),
    ({"stopwords": ["ab"], "is_case_sensitive": 1, "case_change_action": "LOWER"}, (9,)),
    ({"case_change_action": "UPPER"}, (1, 9)),
    ({"stopwords": LETTERS + [""]}, (9,)),  # everything goes: one empty string
])
def test_string_normalizer_matches_onnxruntime(rng, attrs, shape):
    """onnx's reference splits elements on spaces and strips accents, which the spec does not say;
    onnxruntime implements the spec (whole elements are stopwords), as we do."""
    x = _words(rng, shape, 3)
    x.flat[0] = "ab"
    attrs = {**attrs, "locale": "C.UTF-8"}  # onnxruntime refuses a locale that is not installed
    model = _one_node(helper.make_node("StringNormalizer", ["x"], ["y"], **attrs), {"x": x},
                      [("y", TensorProto.STRING)], opset=17)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (got,) = tob.InferenceSession(model).run(None, {"x": x})
    _assert_same(got, want)


@pytest.mark.parametrize("keys, values, default", [
    (["a", "b", "Zé", ""], np.array([5, -2, 9, 11], np.int64), np.array([-7], np.int64)),
    (np.array([1, -4, 7], np.int64), ["one", "minus four", "seven"], ["none"]),
    (np.array([0.5, -2.0, -1.25], np.float32), np.array([1.5, 2.5, -3.5], np.float32), np.array([0.75], np.float32)),
    (np.array([3, 1], np.int32), np.array([0.25, -8.0], np.float64), np.array([9.5], np.float64)),
    (np.array([3, 1, -2], np.int16), np.array([4, 5, 6], np.int16), np.array([-1], np.int16)),
])
def test_label_encoder_opset4_tensors(rng, keys, values, default):
    """(The reference needs default_tensor; NaN keys, which it cannot look up, are in the C++ test.)"""
    def tensor(name, v):
        if isinstance(v, list):
            return helper.make_tensor(name, TensorProto.STRING, [len(v)], [s.encode() for s in v])
        return onnx.numpy_helper.from_array(v, name)

    if isinstance(keys, list):
        x = _words(rng, (3, 4), 2)
        x.flat[:3] = keys[:3]
    else:
        x = rng.choice(np.concatenate([keys, np.array([2, 0], keys.dtype)]), size=(3, 4)).astype(keys.dtype)
    out_type = TensorProto.STRING if isinstance(values, list) else helper.np_dtype_to_tensor_dtype(values.dtype)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_tensor=tensor("k", keys),
                            values_tensor=tensor("v", values), default_tensor=tensor("d", default))
    model = _one_node(node, {"x": x}, [("y", out_type)], ml_opset=4)
    _check_against_reference(model, {"x": x})


def test_label_encoder_opset2_attributes(rng):
    x = _words(rng, (10,), 1)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=["a", "b", "Z"],
                            values_floats=[0.5, -1.5, 3.0], default_float=42.0)
    model = _one_node(node, {"x": x}, [("y", TensorProto.FLOAT)], ml_opset=2)
    _check_against_reference(model, {"x": x})


# ---- Cast ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int8, np.uint16, np.int64, np.bool_])
def test_cast_to_string_as_numpy(rng, dtype):
    if dtype == np.bool_:
        x = rng.random((5, 6)) < 0.5
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=(5, 6), dtype=dtype, endpoint=True)
    else:  # magnitudes across the positional / scientific boundaries, and the special values
        top = 5 if dtype == np.float16 else 20  # float16 ends at 65504
        x = (rng.standard_normal((5, 6)) * 10.0 ** rng.integers(-9, top, size=(5, 6))).astype(dtype)
        x.flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
    model = _one_node(helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING), {"x": x},
                      [("y", TensorProto.STRING)])
    _check_against_reference(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int32, np.uint8])
def test_cast_from_string_as_numpy(rng, dtype):
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = [str(v) for v in rng.integers(info.min, info.max, size=12)]
        values[:3] = [" 12 ", "+7", "0"]
    else:
        values = [repr(float(v)) for v in rng.standard_normal(12) * 1e3]
        values[:6] = [" 1.5", "1_000.25", "-inf", "NaN", "1e-3", ".5"]
    x = np.array(values, dtype=object).reshape(3, 4)
    model = _one_node(helper.make_node("Cast", ["x"], ["y"], to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype))),
                      {"x": x}, [("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))])
    _check_against_reference(model, {"x": x})


def test_cast_of_text_that_is_no_number_names_the_element():
    x = np.array(["1", "2", "x3"], dtype=object)
    model = _one_node(helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT, name="to_float"), {"x": x},
                      [("y", TensorProto.FLOAT)])
    with pytest.raises(tob.KernelError, match=r"Cast node 'to_float'.*element 2 \"x3\" is not a float32"):
        tob.InferenceSession(model).run(None, {"x": x})


# ---- data movement on strings -------------------------------------------------------------------


def _movement_cases(rng):
    x = _words(rng, (3, 4, 2))
    i64 = lambda v: onnx.numpy_helper.from_array(np.array(v, np.int64))  # noqa: E731
    yield "Transpose", [helper.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 1])], {"x": x}
    yield "Gather", [helper.make_node("Constant", [], ["i"], value=i64([[2, -1], [0, 1]])),
                     helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], {"x": x}
    yield "GatherElements", [helper.make_node("Constant", [], ["i"], value=i64(rng.integers(-3, 3, (2, 4, 2)))),
                             helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)], {"x": x}
    yield "Concat", [helper.make_node("Concat", ["x", "x"], ["y"], axis=-1)], {"x": x}
    yield "Slice", [helper.make_node("Constant", [], ["s"], value=i64([3, 0])),
                    helper.make_node("Constant", [], ["e"], value=i64([-5, 3])),
                    helper.make_node("Constant", [], ["a"], value=i64([1, 0])),
                    helper.make_node("Constant", [], ["st"], value=i64([-2, 2])),
                    helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], {"x": x}
    yield "Reshape", [helper.make_node("Constant", [], ["s"], value=i64([4, -1])),
                      helper.make_node("Reshape", ["x", "s"], ["y"])], {"x": x}
    yield "Expand", [helper.make_node("Constant", [], ["s"], value=i64([2, 3, 4, 2])),
                     helper.make_node("Expand", ["x", "s"], ["y"])], {"x": x}
    yield "Tile", [helper.make_node("Constant", [], ["r"], value=i64([1, 2, 2])),
                   helper.make_node("Tile", ["x", "r"], ["y"])], {"x": x}
    c = rng.random((4, 2)) < 0.5
    yield "Where", [helper.make_node("Where", ["c", "x", "z"], ["y"])], {"c": c, "x": x, "z": _words(rng, (2,))}
    yield "Compress", [helper.make_node("Compress", ["x", "c"], ["y"], axis=1)], {"x": x, "c": rng.random(4) < 0.5}
    lens = rng.integers(0, 4, size=4).astype(np.int64)
    yield "ReverseSequence", [helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=0, batch_axis=1)], \
        {"x": x[:, :, 0].copy(), "l": np.minimum(lens, 3)}
    yield "Unsqueeze+Squeeze+Identity+Flatten", [
        helper.make_node("Constant", [], ["ax"], value=i64([0, 3])),
        helper.make_node("Unsqueeze", ["x", "ax"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax"], ["q"]),
        helper.make_node("Flatten", ["q"], ["f"], axis=2),
        helper.make_node("Identity", ["f"], ["y"])], {"x": x}


def test_data_movement_ops_move_strings(rng):
    for name, nodes, feeds in _movement_cases(rng):
        inputs = [_tensor_info(k, v) for k, v in feeds.items()]
        model = _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
        want = ReferenceEvaluator(model).run(None, feeds)
        got = tob.InferenceSession(model).run(None, feeds)
        _assert_same(got[0], want[0], name)


def test_string_feeds_of_every_numpy_form_and_bytes_that_are_not_utf8():
    model = _one_node(helper.make_node("StringConcat", ["a", "b"], ["y"]),
                      {"a": np.array(["x", "z"], object), "b": np.array(["y", "w"], object)},
                      [("y", TensorProto.STRING)])
    sess = tob.InferenceSession(model)
    for a in (np.array(["é", "b"]), np.array([b"\xc3\xa9", b"b"]), np.array(["é", b"b"], dtype=object)):
        (y,) = sess.run(None, {"a": a, "b": np.array(["!", "?"], dtype=object)})
        assert y.dtype == object and list(y) == ["é!", "b?"]
    # Bytes that are not UTF-8 survive the round trip (surrogateescape), as onnxruntime's bytes do.
    (y,) = sess.run(None, {"a": np.array([b"\xff\xfe", b"ok"], dtype=object),
                           "b": np.array([b"\x80", b""], dtype=object)})
    assert y[0].encode("utf-8", "surrogateescape") == b"\xff\xfe\x80" and y[1] == "ok"


def test_string_outputs_cannot_become_torch_tensors():
    model = _one_node(helper.make_node("Identity", ["a"], ["y"]), {"a": np.array(["x"], object)},
                      [("y", TensorProto.STRING)])
    with pytest.raises(tob.InvalidArgumentError, match=r"output 'y' is a string tensor, which torch cannot hold"):
        tob.InferenceSession(model).run(None, {"a": np.array(["x"], object)}, as_torch=True)


# ---- sequences and optionals --------------------------------------------------------------------


def _seq_info(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def _opt_info(name, elem=TensorProto.FLOAT, shape=None, sequence=False):
    t = helper.make_tensor_type_proto(elem, shape)
    if sequence:
        t = helper.make_sequence_type_proto(t)
    return helper.make_value_info(name, helper.make_optional_type_proto(t))


@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.STRING, TensorProto.INT64])
def test_sequence_ops_against_the_reference(rng, elem):
    def value(shape, seed):
        r = np.random.default_rng(seed)
        if elem == TensorProto.STRING:
            return _words(r, shape)
        return (r.standard_normal(shape) * 100).astype(helper.tensor_dtype_to_np_dtype(elem))

    feeds = {"x": value((4, 6), 1), "t": value((4, 2), 2), "s": [value((4, k), 10 + k) for k in (1, 3)],
             "p": np.array(-1, np.int64)}
    nodes = [
        helper.make_node("Constant", [], ["sizes"], value=onnx.numpy_helper.from_array(np.array([2, 1, 3], np.int64))),
        helper.make_node("SplitToSequence", ["x", "sizes"], ["pieces"], axis=1),
        helper.make_node("SequenceInsert", ["pieces", "t", "p"], ["ins"]),
        helper.make_node("SequenceErase", ["ins"], ["erased"]),
        helper.make_node("SequenceAt", ["ins", "p"], ["at"]),
        helper.make_node("SequenceLength", ["ins"], ["len"]),
        helper.make_node("ConcatFromSequence", ["ins"], ["cat"], axis=1),
        helper.make_node("SequenceConstruct", ["t", "x", "t"], ["built"]),
        helper.make_node("SequenceInsert", ["s", "t"], ["s2"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["scat"], axis=-1, new_axis=0),
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        helper.make_node("ConcatFromSequence", ["rows"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=elem),
        helper.make_node("SequenceInsert", ["empty", "t"], ["one"]),
    ]
    inputs = [_tensor_info("x", feeds["x"]), _tensor_info("t", feeds["t"]), _seq_info("s", elem, [4, None]),
              helper.make_tensor_value_info("p", TensorProto.INT64, [])]
    outputs = [_seq_info("erased", elem), helper.make_tensor_value_info("at", elem, None),
               helper.make_tensor_value_info("len", TensorProto.INT64, []),
               helper.make_tensor_value_info("cat", elem, None), _seq_info("built", elem),
               helper.make_tensor_value_info("scat", elem, None), helper.make_tensor_value_info("stacked", elem, None),
               _seq_info("one", elem), _seq_info("s2", elem)]
    model = _model(nodes, inputs, outputs, opset=21)
    got = _check_against_reference(model, feeds)
    assert [a.shape for a in got[0]] == [(4, 2), (4, 1), (4, 2)]  # t went in before the last piece, which went


def test_optional_ops_against_onnxruntime(rng):
    """onnxruntime is the reference here: onnx's ReferenceEvaluator gives an Optional made from its
    `type` attribute a value, wraps OptionalGetElement's tensor in a list and cannot pass None
    through Identity."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    seq = [rng.standard_normal((3,)).astype(np.float32)]
    nodes = [
        helper.make_node("Optional", ["x"], ["ox"]),
        helper.make_node("OptionalHasElement", ["ox"], ["has_x"]),
        helper.make_node("OptionalGetElement", ["ox"], ["got_x"]),
        helper.make_node("OptionalHasElement", ["o"], ["has_o"]),
        helper.make_node("Identity", ["o"], ["o_again"]),
        helper.make_node("Optional", [], ["none"], type=helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, None))),
        helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
        helper.make_node("OptionalGetElement", ["os"], ["got_s"]),
        helper.make_node("OptionalHasElement", [""], ["has_nothing"]),
        helper.make_node("OptionalGetElement", ["x"], ["plain"]),  # opset 18: a plain tensor too
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]), _opt_info("o", shape=[2]),
              _opt_info("os", sequence=True)]
    b = lambda n: helper.make_tensor_value_info(n, TensorProto.BOOL, [])  # noqa: E731
    outputs = [b("has_x"), helper.make_tensor_value_info("got_x", TensorProto.FLOAT, [2, 3]), b("has_o"),
               _opt_info("o_again", shape=[2]), b("has_none"), _seq_info("got_s"), b("has_nothing"),
               helper.make_tensor_value_info("plain", TensorProto.FLOAT, [2, 3])]
    model = _model(nodes, inputs, outputs, opset=18)
    onnx.checker.check_model(model, full_check=True)
    theirs, ours = ort.InferenceSession(model.SerializeToString()), tob.InferenceSession(model)
    for o in (None, rng.standard_normal(2).astype(np.float32)):
        feeds = {"x": x, "o": o, "os": seq}
        want = theirs.run(None, feeds)
        got = ours.run(None, feeds)
        _assert_same(got, want)
        assert bool(got[2]) is (o is not None) and bool(got[4]) is False


def test_sequence_and_optional_io_in_python(rng):
    model = _model([helper.make_node("SequenceInsert", ["s", "t"], ["out"]),
                    helper.make_node("Identity", ["o"], ["o2"])],
                   [_seq_info("s", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("t", TensorProto.FLOAT, [2]),
                    _opt_info("o", TensorProto.INT64, [3])],
                   [_seq_info("out", TensorProto.FLOAT, [2]), _opt_info("o2", TensorProto.INT64, [3])])
    sess = tob.InferenceSession(model)
    assert [i.type for i in sess.get_inputs()] == ["seq(tensor(float))", "tensor(float)", "optional(tensor(int64))"]
    assert [o.type for o in sess.get_outputs()] == ["seq(tensor(float))", "optional(tensor(int64))"]
    a, b, t = (rng.standard_normal(2).astype(np.float32) for _ in range(3))
    out, o2 = sess.run(None, {"s": [a, torch.from_numpy(b)], "t": t, "o": None})
    assert o2 is None and isinstance(out, list) and len(out) == 3
    for g, w in zip(out, (a, b, t)):
        np.testing.assert_array_equal(g, w)
    out, o2 = sess.run(None, {"s": (), "t": t, "o": np.arange(3)}, as_torch=True)
    assert isinstance(out[0], torch.Tensor) and torch.equal(out[0], torch.from_numpy(t))
    assert torch.equal(o2, torch.arange(3))
    # The same model in onnxruntime: the same values.
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"s": [a, b], "t": t, "o": None})
    got = sess.run(None, {"s": [a, b], "t": t, "o": None})
    _assert_same(got, [list(want[0]), want[1]])


def test_bad_sequence_and_optional_feeds_name_the_input(rng):
    model = _model([helper.make_node("SequenceLength", ["s"], ["n"]), helper.make_node("Identity", ["t"], ["u"])],
                   [_seq_info("s"), helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                    helper.make_tensor_value_info("u", TensorProto.FLOAT, [2])])
    sess = tob.InferenceSession(model)
    t = rng.standard_normal(2).astype(np.float32)
    with pytest.raises(tob.InvalidArgumentError, match=r"input 's'.*expected sequence"):
        sess.run(None, {"s": t, "t": t})
    with pytest.raises(tob.InvalidArgumentError, match=r"input 's' tensor 1.*int64"):
        sess.run(None, {"s": [t, np.arange(2)], "t": t})
    with pytest.raises((tob.InvalidArgumentError, ValueError), match=r"input 't'"):
        sess.run(None, {"s": [t], "t": None})
    with pytest.raises((tob.InvalidArgumentError, ValueError), match=r"input 't'"):
        sess.run(None, {"s": [t], "t": [t]})


def test_a_string_or_a_sequence_in_an_op_that_takes_tensors_is_refused_by_name():
    s = helper.make_tensor_value_info("s", TensorProto.STRING, [2])
    model = _model([helper.make_node("Relu", ["s"], ["y"], name="relu")], [s],
                   [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    with pytest.raises((tob.NotImplementedOpError, tob.InvalidModelError), match=r"Relu node 'relu'.*string"):
        tob.InferenceSession(model)
    model = _model([helper.make_node("Relu", ["s"], ["y"], name="relu")], [_seq_info("s")],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(tob.InvalidModelError, match=r"Relu node 'relu'.*'s' is a sequence.*takes tensors"):
        tob.InferenceSession(model)


def test_maps_and_nested_sequences_are_refused_by_name():
    m = helper.make_value_info("m", helper.make_map_type_proto(TensorProto.INT64,
                                                               helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    nested = helper.make_value_info("n", helper.make_sequence_type_proto(helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, None))))
    for vi, pattern in ((m, r"graph input 'm' is a map"), (nested, r"graph input 'n' is a sequence of sequence")):
        model = _model([helper.make_node("Identity", [vi.name], ["y"])], [vi], [helper.make_value_info("y", vi.type)])
        with pytest.raises(tob.NotImplementedOpError, match=pattern):
            tob.InferenceSession(model)


def test_optimized_model_keeps_strings_and_sequences(rng, tmp_path):
    words = onnx.numpy_helper.from_array(np.array(["a", "bé"], dtype=object), "w")
    nodes = [helper.make_node("StringConcat", ["x", "w"], ["c"]),
             helper.make_node("SequenceConstruct", ["c", "c"], ["s"]),
             helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(TensorProto.STRING, None)),
             helper.make_node("OptionalHasElement", ["none"], ["has"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                   [_seq_info("s", TensorProto.STRING), helper.make_tensor_value_info("has", TensorProto.BOOL, [])],
                   initializers=[words])
    options = tob.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    x = _words(rng, (2,))
    got = tob.InferenceSession(model, options).run(None, {"x": x})
    saved = onnx.load(options.optimized_model_filepath)
    onnx.checker.check_model(saved)
    _assert_same(tob.InferenceSession(saved).run(None, {"x": x}), got)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})  # (the reference's Optional is off)
    _assert_same(got, [list(want[0]), want[1]])


# ---- TfIdfVectorizer's string form (pool_strings) -----------------------------------------------

_TFIDF_WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "", "zebra"]  # "zebra" is in no n-gram
_TFIDF_POOL = (["the", "cat", "sat", "mat", "dog"]  # 1-grams
               + ["the", "cat", "cat", "sat", "on", "the", "a", "dog"]  # 2-grams
               + ["the", "cat", "sat", "sat", "on", "the"])  # 3-grams
_TFIDF_COUNTS = [0, 5, 13]
_TFIDF_NGRAMS = 5 + 4 + 2


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((2, 2), 0), ((1, 2), 2), ((2, 3), 1), ((1, 3), 5)])
@pytest.mark.parametrize("shape", [(15,), (3, 9)])
def test_tfidf_vectorizer_string_pool(rng, mode, grams, skip, shape):
    """Strings counted against pool_strings as the reference counts them: every gram range and skip
    count, 1-D and batched input, output columns in a random order (two n-grams sharing one), with
    and without weights."""
    x = np.empty(int(np.prod(shape)), dtype=object)
    x[:] = list(rng.choice(_TFIDF_WORDS, size=x.size))
    x = x.reshape(shape)
    indexes = rng.permutation(_TFIDF_NGRAMS)
    indexes[indexes == _TFIDF_NGRAMS - 1] = 0  # two n-grams count into column 0
    attrs = dict(mode=mode, min_gram_length=grams[0], max_gram_length=grams[1], max_skip_count=skip,
                 ngram_counts=_TFIDF_COUNTS, ngram_indexes=indexes.tolist(), pool_strings=_TFIDF_POOL)
    if mode != "TF":
        attrs["weights"] = rng.uniform(0.5, 2.0, size=_TFIDF_NGRAMS - 1).astype(np.float32).tolist()
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    model = _one_node(node, {"x": x}, [("y", TensorProto.FLOAT)], opset=21)
    (got,) = _check_against_reference(model, {"x": x})
    assert got.shape == (*shape[:-1], _TFIDF_NGRAMS - 1)
    assert np.count_nonzero(got) > 0  # the inputs meet the pool


def test_tfidf_vectorizer_pool_and_input_kinds_must_agree(rng):
    """An int64 X with pool_strings (and a string X with pool_int64s) is refused, naming the node."""
    strings = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=1,
                               max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1], pool_strings=["a", "b"])
    ints = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=1,
                            max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1], pool_int64s=[1, 2])
    words = np.array(["a", "b", "c"], dtype=object)
    for node, x, want in ((strings, np.array([1, 2, 3], dtype=np.int64), "X must be string with pool_strings"),
                          (ints, words, "X must be int32 or int64 with pool_int64s")):
        graph = helper.make_graph([node], "g", [_tensor_info("x", x)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
        with pytest.raises(Exception, match=want) as err:
            tob.InferenceSession(model).run(None, {"x": x})
        assert "TfIdfVectorizer" in str(err.value)
