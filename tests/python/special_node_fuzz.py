"""Fuzz worker for test_bad_input.py: ATen, PythonOp, subgraph-bearing, sequence / optional and
string nodes with mutated attributes, inputs, value types and bytes. Runs in its own process (a crash of a torch kernel would otherwise take
pytest with it) and prints one JSON line: per family, how many cases raised an expected error and how
many ran, plus any unexpected exception. The parent asserts a clean exit and the counts.

    python special_node_fuzz.py SEED CASES_PER_FAMILY
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from typing import Callable

import numpy as np
import onnx
import torch
from onnx import TensorProto, TypeProto, helper

import torch_ort_backend as tob
from aten_model_builder import ModelBuilder
from torch_ort_backend import onnx_loader
from torch_ort_backend._engine import C
from torch_ort_backend.exporter.aten_encoding import AtenEncodingError
from test_bad_input import _mutations

aten = torch.ops.aten
MS_OPSETS = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
EXPECTED = (tob.EngineError, ValueError, TypeError, NotImplementedError, PermissionError)


class Skipped(Exception):
    """The case could not be built (the test's own encoder refused it): counted apart."""


class Scale(torch.autograd.Function):
    """The Function the PythonOp cases may legitimately name (registered for loaded models)."""

    @staticmethod
    def forward(ctx, x, factor=2.0):
        return x * factor

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0, None


SCALE_NAME = tob.register_autograd_function(Scale)


def wild_int(rng: random.Random) -> int:
    return rng.choice([0, 1, -1, 2, 3, -5, 7, 2**31, -(2**31), 2**62, -(2**62), 10**9, rng.randint(-50, 50)])


def index_tensor(rng: random.Random, shape, limit: int) -> torch.Tensor:
    """Indices mostly in [-limit, limit), some far out of range."""
    values = [rng.randrange(-limit, limit) if rng.random() < 0.6 else wild_int(rng) for _ in range(int(np.prod(shape)))]
    return torch.tensor(values, dtype=torch.int64).reshape(shape)


def floats(rng: random.Random, shape) -> torch.Tensor:
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    return torch.rand(shape, generator=g) * 2 - 1


def shape(rng: random.Random, rank: int, low: int = 0, high: int = 5) -> tuple:
    return tuple(rng.randint(low, high) for _ in range(rank))


# Each returns (op, args, kwargs, feeds); tensors in args are graph inputs (ModelBuilder.input).
def _gather(b, rng):
    x = floats(rng, shape(rng, 2, 1))
    return aten.gather.default, (b.input("x", x), rng.choice([0, 1, -1, 5]), b.input("i", index_tensor(rng, shape(rng, 2), 6)))


def _scatter_add(b, rng):
    x, i = floats(rng, shape(rng, 2, 1)), index_tensor(rng, shape(rng, 2), 6)
    return aten.scatter_add.default, (b.input("x", x), rng.choice([0, 1]), b.input("i", i),
                                      b.input("s", floats(rng, tuple(i.shape))))


def _index_select(b, rng):
    return aten.index_select.default, (b.input("x", floats(rng, shape(rng, 2, 1))), rng.choice([0, 1, 3]),
                                       b.input("i", index_tensor(rng, (rng.randint(0, 4),), 6)))


def _index_tensor(b, rng):
    return aten.index.Tensor, (b.input("x", floats(rng, shape(rng, 3, 1))),
                               [None, b.input("i", index_tensor(rng, (rng.randint(0, 4),), 6))])


def _index_put(b, rng):
    i = index_tensor(rng, (rng.randint(0, 4),), 6)
    return aten.index_put.default, (b.input("x", floats(rng, shape(rng, 1, 1))), [b.input("i", i)],
                                    b.input("v", floats(rng, (rng.choice([1, i.numel()]),))), rng.random() < 0.5)


def _index_add(b, rng):
    i = index_tensor(rng, (rng.randint(0, 4),), 6)
    return aten.index_add.default, (b.input("x", floats(rng, shape(rng, 2, 1))), rng.choice([0, 1]), b.input("i", i),
                                    b.input("s", floats(rng, (i.numel(), rng.randint(1, 4)))))


def _take(b, rng):
    return aten.take.default, (b.input("x", floats(rng, shape(rng, 2))), b.input("i", index_tensor(rng, (3,), 20)))


def _embedding(b, rng):
    return aten.embedding.default, (b.input("w", floats(rng, shape(rng, 2, 1))),
                                    b.input("i", index_tensor(rng, shape(rng, 2), 8)), wild_int(rng))


def _embedding_dense_backward(b, rng):
    i = index_tensor(rng, (rng.randint(0, 5),), 8)
    return aten.embedding_dense_backward.default, (b.input("g", floats(rng, (rng.randint(0, 5), 3))), b.input("i", i),
                                                   rng.choice([0, 1, 5, 10**6]), wild_int(rng), False)


def _nll_loss(b, rng):
    n, c = rng.randint(1, 4), rng.randint(1, 4)
    return aten.nll_loss_forward.default, (b.input("x", floats(rng, (n, c))), b.input("t", index_tensor(rng, (n,), c + 2)),
                                           None, rng.choice([0, 1, 2]), wild_int(rng))


def _one_hot(b, rng):
    return aten.one_hot.default, (b.input("i", index_tensor(rng, (4,), 6)), rng.choice([-1, 3, 6]))


def _searchsorted(b, rng):
    return aten.searchsorted.Tensor, (b.input("s", floats(rng, (5,)).sort().values), b.input("v", floats(rng, (3,)))), \
        {"sorter": b.input("o", index_tensor(rng, (5,), 7))}


def _max_pool_backward(b, rng):  # refused: torch does not check the indices
    return aten.max_pool2d_with_indices_backward.default, (
        b.input("g", floats(rng, (1, 1, 2, 2))), b.input("x", floats(rng, (1, 1, 4, 4))), [2, 2], [2, 2], [0, 0],
        [1, 1], False, b.input("i", index_tensor(rng, (1, 1, 2, 2), 16)))


def _layer_norm_backward(b, rng):  # refused: torch does not check mean / rstd
    return aten.native_layer_norm_backward.default, (
        b.input("g", floats(rng, (6, 4))), b.input("x", floats(rng, (6, 4))), [4], b.input("m", floats(rng, (1, 1))),
        b.input("r", floats(rng, (1, 1))), None, None, [True, False, False])


ATEN_CASES: list[Callable] = [_gather, _scatter_add, _index_select, _index_tensor, _index_put, _index_add, _take,
                              _embedding, _embedding_dense_backward, _nll_loss, _one_hot, _searchsorted,
                              _max_pool_backward, _layer_norm_backward]


def aten_case(rng: random.Random) -> None:
    """An index-taking operator with random shapes and wild indices; sometimes its node mutated, or
    the serialized model's bytes."""
    b = ModelBuilder()
    op, args, kwargs = (rng.choice(ATEN_CASES)(b, rng) + ({},))[:3]
    try:
        (out,) = b.aten(op, args, kwargs, outputs=1, name="fuzzed")
    except AtenEncodingError as e:  # the exporter's encoder refused the arguments: no model to run
        raise Skipped from e
    model = b.model({out: torch.zeros(0)})
    node = model.graph.node[-1]
    mutation = rng.random()
    if mutation < 0.15:
        _set_attr(node, "operator", rng.choice(["from_file", "mylib::op", "prims::iota", "add", "::", "aten::",
                                                 "a" * 300, "relu_", "_print", "no_such_op"]))
    elif mutation < 0.25:
        _set_attr(node, "tensor_list_lengths", [wild_int(rng) for _ in range(rng.randint(1, 3))])
    elif mutation < 0.3:
        _set_attr(node, "overload_name", rng.choice(["", "default", "out", "Tensor", "bogus"]))
    elif mutation < 0.35 and node.input:
        del node.input[rng.randrange(len(node.input)):]
    if rng.random() < 0.2:
        data = next(iter(_mutations(np.random.default_rng(rng.randrange(1 << 30)), model.SerializeToString(), 1)))
        tob.InferenceSession(data).run(None, b.feeds)
    else:
        tob.InferenceSession(model).run(None, b.feeds)


def _set_attr(node, key, value) -> None:
    for a in list(node.attribute):
        if a.name == key:
            node.attribute.remove(a)
    node.attribute.extend([helper.make_attribute(key, value)])


def python_op_case(rng: random.Random) -> None:
    """A PythonOp / PythonOpGrad with random names, conventions, constants and context ids."""
    grad = rng.random() < 0.3
    func_name = rng.choice([SCALE_NAME, SCALE_NAME + "@" + "0" * 32, "os.system", "builtins.eval", "", "x" * 500,
                            "torch.autograd.Function", SCALE_NAME + "#2"])
    if grad:
        node = helper.make_node("PythonOpGrad", ["ctx", "x"], ["dx"], domain="com.microsoft", func_name=func_name,
                                input_requires_grads=[rng.choice([0, 1, 2])])
        inputs = [helper.make_tensor_value_info("ctx", TensorProto.INT64, []),
                  helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
        outputs = [helper.make_tensor_value_info("dx", TensorProto.FLOAT, [4])]
        feeds = {"ctx": np.array(wild_int(rng), np.int64), "x": np.ones(4, np.float32)}
    else:
        constants = rng.choice(["[]", "[2.0]", '[{"object": 1}]', '[{"object": "00"}]', '[{"import": "os"}]',
                                '[{"dtype": "save"}]', '[{"device": "cuda:99"}]', "[[[[[[[]]]]]]]", "{", '"s"',
                                '[{"tuple": [1, {"tuple": []}]}]', "[1e999]", "[" * 2000 + "]" * 2000])
        node = helper.make_node("PythonOp", ["x"], ["ctx", "y"], domain="com.microsoft", func_name=func_name,
                                input_convention=rng.choice(["d", "dc", "cd", "ddd", "", "z"]), constant_args=constants,
                                input_requires_grads=[rng.choice([0, 1])])
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])]
        feeds = {"x": np.ones(4, np.float32)}
    model = helper.make_model(helper.make_graph([node], "g", inputs, outputs), opset_imports=MS_OPSETS)
    tob.InferenceSession(model).run(None, feeds)


# ---- control flow ----

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
ENGINE_REFUSALS = Counter()  # errors raised by the engine itself (onnx's checker skipped)
UNNAMED: list[str] = []  # expected errors whose message names nothing


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _if_model(rng: random.Random):
    then_branch = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then_branch", [], [_vi("t", F, [4])])
    else_branch = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["e"])], "else_branch", [], [_vi("e", F, [4])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch, name="branch")
    return [node], [_vi("c", BOOL, []), _vi("x", F, [4]), _vi("w", F, [4])], [_vi("y", F, [4])]


def _loop_body(nested: bool):
    nodes = [helper.make_node("Add", ["v_in", "w"], ["v_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Identity", ["v_out"], ["scan_out"])]
    if nested:  # an If inside the body, reading the body's and the main graph's values
        then_branch = helper.make_graph([helper.make_node("Mul", ["v_in", "w"], ["t"])], "then_branch", [],
                                        [_vi("t", F, [4])])
        else_branch = helper.make_graph([helper.make_node("Neg", ["v_in"], ["e"])], "else_branch", [],
                                        [_vi("e", F, [4])])
        nodes[0] = helper.make_node("If", ["cond_in"], ["v_out"], then_branch=then_branch, else_branch=else_branch,
                                    name="inner")
    return helper.make_graph(nodes, "body", [_vi("i", I64, []), _vi("cond_in", BOOL, []), _vi("v_in", F, [4])],
                             [_vi("cond_out", BOOL, []), _vi("v_out", F, [4]), _vi("scan_out", F, [4])])


def _loop_model(rng: random.Random):
    node = helper.make_node("Loop", ["m", "c", "x"], ["y", "history"], body=_loop_body(rng.random() < 0.5), name="loop")
    return [node], [_vi("m", I64, []), _vi("c", BOOL, []), _vi("x", F, [4]), _vi("w", F, [4])], \
        [_vi("y", F, [4]), _vi("history", F, None)]


def _scan_model(rng: random.Random):
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
                              helper.make_node("Mul", ["s_out", "w"], ["o"])],
                             "body", [_vi("s_in", F, [4]), _vi("x_t", F, [4])], [_vi("s_out", F, [4]), _vi("o", F, [4])])
    node = helper.make_node("Scan", ["w", "xs"], ["s", "os"], body=body, num_scan_inputs=1, name="scan",
                            scan_input_directions=[rng.choice([0, 1])], scan_output_axes=[rng.choice([0, 1, -1])])
    return [node], [_vi("w", F, [4]), _vi("xs", F, [3, 4]), _vi("c", BOOL, []), _vi("x", F, [4])], \
        [_vi("s", F, [4]), _vi("os", F, None)]


def _subgraphs(graph):
    """Every (node, attribute, graph) below `graph`, recursively."""
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield node, a, a.g
                yield from _subgraphs(a.g)


def _mutate_subgraph(rng: random.Random, graph) -> str:
    """One mutation inside a random subgraph; returns its kind."""
    subs = list(_subgraphs(graph))
    owner, attr, sub = rng.choice(subs)
    kind = rng.choice(["truncate", "dangling", "arity", "cycle", "attribute", "self_read"])
    if kind == "truncate" and len(sub.node) > 0:
        del sub.node[rng.randrange(len(sub.node)):]
    elif kind == "dangling" and len(sub.node) > 0:
        n = rng.choice(sub.node)
        if n.input:
            n.input[rng.randrange(len(n.input))] = rng.choice(["nowhere", "", "y", "v_out", "scan_out", "s"])
    elif kind == "arity":
        target = rng.choice([sub.input, sub.output])
        if len(target) > 0 and rng.random() < 0.7:
            del target[rng.randrange(len(target))]
        else:
            target.extend([_vi(f"extra{len(target)}", F, [4])])
    elif kind == "cycle":  # a subgraph reads its own node's output, or a value defined after the reader
        if len(sub.node) > 0:
            n = sub.node[0]
            n.input.extend([owner.output[0]] if rng.random() < 0.5 else [sub.node[-1].output[0]])
    elif kind == "attribute":
        for a in list(owner.attribute):
            if a.type == onnx.AttributeProto.INT or a.type == onnx.AttributeProto.INTS:
                owner.attribute.remove(a)
        key = rng.choice(["num_scan_inputs", "scan_input_axes", "scan_output_axes", "scan_input_directions"])
        value = rng.choice([wild_int(rng), [wild_int(rng)], [0, 1, 2]])
        if key == "num_scan_inputs" and isinstance(value, list):
            value = value[0]
        owner.attribute.extend([helper.make_attribute(key, value)])
    else:  # self_read: an output of the subgraph names one of its inputs or an outer value
        if len(sub.output) > 0:
            sub.output[0].name = rng.choice(["x", "w", "c", "i", "cond_in"])
    return kind


def _deeply_nested(rng: random.Random):
    depth = rng.randint(C.MAX_SUBGRAPH_NESTING - 2, C.MAX_SUBGRAPH_NESTING + 6)
    inner = helper.make_graph([helper.make_node("Neg", ["x"], ["y0"])], "level0", [], [_vi("y0", F, [4])])
    for level in range(1, depth + 1):
        other = helper.make_graph([helper.make_node("Abs", ["x"], [f"z{level}"])], f"o{level}", [],
                                  [_vi(f"z{level}", F, [4])])
        node = helper.make_node("If", ["c"], [f"y{level}"], then_branch=inner, else_branch=other, name=f"if{level}")
        inner = helper.make_graph([node], f"level{level}", [], [_vi(f"y{level}", F, [4])])
    node = inner.node[0]
    node.output[0] = "y"
    return [node], [_vi("c", BOOL, []), _vi("x", F, [4]), _vi("w", F, [4])], [_vi("y", F, [4])]


NAMED = ("node", "subgraph", "graph", "input", "output", "value", "model", "attribute", "dtype", "shape", "parse",
         "valid", "name")


def subgraph_case(rng: random.Random) -> None:
    """If / Loop / Scan models (a Loop nesting an If, values read from enclosing graphs), mutated
    inside a subgraph (truncated, dangling names, wrong arity, cycles, wild attributes, an output
    naming an input) or nested past the limit, sometimes byte-mutated; loaded through
    InferenceSession (onnx's checker first) or straight into the engine (no checker)."""
    builder = rng.choice([_if_model, _loop_model, _scan_model, _deeply_nested])
    nodes, inputs, outputs = builder(rng)
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    if builder is not _deeply_nested and rng.random() < 0.7:
        _mutate_subgraph(rng, graph)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"c": np.array(rng.random() < 0.5), "x": np.ones(4, np.float32) * 0.5, "w": np.full(4, -1.5, np.float32),
             "m": np.array(rng.choice([0, 1, 3, -1]), np.int64), "xs": np.ones((3, 4), np.float32)}
    try:
        if rng.random() < 0.5:
            data = model.SerializeToString()
            if rng.random() < 0.3:
                data = next(iter(_mutations(np.random.default_rng(rng.randrange(1 << 30)), data, 1 + rng.randrange(3))))
            sess = tob.InferenceSession(data)
            sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs() if i.name in feeds})
        else:  # the engine's own checks, with nothing in front of them
            try:
                b = onnx_loader.build_graph(model)
                sess = C.Session(b, C.SessionOptions())
                names = [name for name, _, _ in sess.inputs()]
                sess.run(names, [feeds[n] for n in names], [])
            except tob.EngineError as e:
                ENGINE_REFUSALS[type(e).__name__] += 1
                raise
            except KeyError:  # a mutation renamed an input: nothing to feed
                raise ValueError("no feed for a renamed input") from None
    except EXPECTED as e:
        if not any(word in str(e).lower() for word in NAMED):
            UNNAMED.append(f"{type(e).__name__}: {str(e)[:200]}")
        raise


def _random_type_proto(rng: random.Random, elem: int, shape) -> TypeProto:
    """A tensor type, sometimes made a sequence, an optional, or something the engine refuses (a
    map, a sequence of sequences, an optional of an optional, an element type out of range)."""
    t = helper.make_tensor_type_proto(elem if rng.random() < 0.9 else rng.randrange(0, 40), shape)
    roll = rng.random()
    if roll < 0.2:
        t = helper.make_sequence_type_proto(t)
    elif roll < 0.3:
        t = helper.make_optional_type_proto(t)
    elif roll < 0.34:
        t = helper.make_map_type_proto(TensorProto.INT64, t)
    elif roll < 0.38:
        t = helper.make_sequence_type_proto(helper.make_sequence_type_proto(t))
    elif roll < 0.42:
        t = helper.make_optional_type_proto(helper.make_optional_type_proto(t))
    elif roll < 0.45:
        t = helper.make_sequence_type_proto(TypeProto())
    return t


def _feed_for(rng: random.Random, arg) -> object:
    """A feed for an input of onnxruntime-style type name `arg.type`, sometimes of the wrong kind."""
    shape = [d if isinstance(d, int) and 0 <= d < 6 else rng.randrange(1, 4) for d in (arg.shape or [])]
    is_string = "string" in arg.type

    def tensor():
        if is_string:
            return np.array(["".join(rng.choice("ab é,") for _ in range(rng.randrange(4)))
                             for _ in range(int(np.prod(shape)))], dtype=object).reshape(shape)
        if "int64" in arg.type:
            return np.array(rng.randrange(-4, 5), dtype=np.int64).reshape(()) if not shape else \
                np.full(shape, rng.randrange(-4, 5), dtype=np.int64)
        return np.ones(shape, dtype=np.float32) * rng.uniform(-2, 2)

    roll = rng.random()
    if roll < 0.08:
        return None
    if roll < 0.14:
        return [tensor()]
    if arg.type.startswith(("seq(", "optional(seq(")):
        return [tensor() for _ in range(rng.randrange(4))]
    return tensor()


def sequence_case(rng: random.Random) -> None:
    """Sequence, optional and string ops with wild attributes, positions and input types (type protos
    mutated into sequences, optionals, maps, nested kinds), string initializers with the wrong count
    of strings or raw bytes, sometimes byte-mutated: each refused with a named error, or run."""
    f, s64, st = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING
    kind = rng.choice(["split_concat", "insert_erase", "optional", "string_ops", "string_init"])
    inits = []
    if kind == "split_concat":
        inputs = [("x", f, [rng.randrange(0, 4), 3]), ("split", s64, rng.choice([[], [2], [3]]))]
        nodes = [helper.make_node("SplitToSequence", ["x", "split"] if rng.random() < 0.6 else ["x"], ["s"],
                                  axis=wild_int(rng) % 5 - 2, keepdims=rng.randrange(-1, 3)),
                 helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=wild_int(rng) % 7 - 3,
                                  new_axis=rng.choice([0, 1, 2]))]
        outputs = [("y", f, ["a", "b"])]
    elif kind == "insert_erase":
        inputs = [("s", f, [2]), ("t", f, [2]), ("p", s64, [])]
        nodes = [helper.make_node("SequenceInsert", ["s", "t", "p"] if rng.random() < 0.7 else ["s", "t"], ["s2"]),
                 helper.make_node("SequenceErase", ["s2", "p"], ["s3"]),
                 helper.make_node("SequenceAt", ["s3", "p"], ["y"]),
                 helper.make_node("SequenceLength", ["s3"], ["n"])]
        outputs = [("y", f, ["a"]), ("n", s64, [])]
    elif kind == "optional":
        inputs = [("o", f, [2]), ("x", f, [2])]
        type_attr = {"type": _random_type_proto(rng, f, None)} if rng.random() < 0.7 else {}
        nodes = [helper.make_node("Optional", rng.choice([[], ["x"]]), ["made"], **type_attr),
                 helper.make_node("OptionalHasElement", [rng.choice(["o", "made", ""])], ["has"]),
                 helper.make_node("OptionalGetElement", [rng.choice(["o", "made", "x"])], ["y"])]
        outputs = [("has", TensorProto.BOOL, []), ("y", f, ["a"])]
    elif kind == "string_ops":
        inputs = [("x", st, [rng.randrange(0, 4)])]
        op = rng.choice(["StringSplit", "RegexFullMatch", "StringNormalizer", "Cast", "StringConcat"])
        attrs = {"StringSplit": {"delimiter": rng.choice(["", ",", "é"]), "maxsplit": wild_int(rng) % 4 - 1},
                 "RegexFullMatch": {"pattern": rng.choice(["a*", "(", "[b-a]", "é+", "(?P<x>a)\\1"])},
                 "StringNormalizer": {"locale": rng.choice(["en_US", "tr_TR", "xx", ""]),
                                      "case_change_action": rng.choice(["LOWER", "UPPER", "NONE", "ODD"]),
                                      "stopwords": ["a"]},
                 "Cast": {"to": rng.choice([f, s64, TensorProto.FLOAT16, TensorProto.BOOL, st, 0, 99])},
                 "StringConcat": {}}[op]
        node_inputs = ["x", "x"] if op == "StringConcat" else ["x"]
        nodes = [helper.make_node(op, node_inputs, ["y", "n"] if op == "StringSplit" else ["y"], **attrs)]
        out_type = {"RegexFullMatch": TensorProto.BOOL, "Cast": attrs.get("to", st)}.get(op, st)
        outputs = [("y", out_type, ["a", "b"] if op == "StringSplit" else ["a"])]
    else:
        count = rng.randrange(0, 4)  # sometimes not the count the dims need
        strings = TensorProto(name="w", data_type=st, dims=[rng.choice([count, count + 1, 2])], string_data=[b"a"] * count)
        if rng.random() < 0.3:
            strings.raw_data = b"\x00" * 8
        inits.append(strings)
        inputs = [("x", st, [2])]
        nodes = [helper.make_node("StringConcat", ["x", "w"], ["y"])]
        outputs = [("y", st, ["a"])]
    value_infos = [helper.make_value_info(n, _random_type_proto(rng, t, shape)) for n, t, shape in inputs]
    graph = helper.make_graph(nodes, "g", value_infos, [helper.make_tensor_value_info(*o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    data = model.SerializeToString()
    if rng.random() < 0.3:
        data = next(iter(_mutations(np.random.default_rng(rng.randrange(1 << 30)), data, 1 + rng.randrange(3))))
    sess = tob.InferenceSession(data)
    sess.run(None, {arg.name: _feed_for(rng, arg) for arg in sess.get_inputs()})


FAMILIES = {"aten": aten_case, "python_op": python_op_case, "subgraph": subgraph_case, "sequence": sequence_case}


def main(seed: int, cases: int) -> None:
    torch.manual_seed(seed)
    outcomes: dict[str, Counter] = {name: Counter() for name in FAMILIES}
    unexpected: list[str] = []
    for name, case in FAMILIES.items():
        rng = random.Random(f"{seed}-{name}")
        for k in range(cases):
            try:
                case(rng)
                outcomes[name]["ran"] += 1
            except Skipped:
                outcomes[name]["skipped"] += 1
            except EXPECTED as e:
                outcomes[name][type(e).__name__] += 1
            except Exception as e:  # noqa: BLE001 - reported, the parent fails on it
                unexpected.append(f"{name} case {k}: {type(e).__name__}: {str(e)[:300]}")
    unexpected += [f"an error that names nothing: {m}" for m in UNNAMED]
    print(json.dumps({"outcomes": {k: dict(v) for k, v in outcomes.items()}, "unexpected": unexpected,
                      "engine_refusals": sum(ENGINE_REFUSALS.values())}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
