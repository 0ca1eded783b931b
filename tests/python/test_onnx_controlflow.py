"""If, Loop and Scan through InferenceSession on random data, beyond onnx's node tests (which
test_onnx_conformance.py runs): nested control flow reading values of enclosing graphs, early
exits, Scan's axes and directions and its batched opset-8 form, the optimised model with its
subgraphs saved and loaded back, and the errors of malformed subgraphs. References: onnx's
ReferenceEvaluator where it implements the case, float64 numpy where it does not (Scan's axes and
directions)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import torch_ort_backend as tob

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, opset=17, initializers=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def run_both(m, feeds, rtol=1e-5, atol=1e-6):
    ours = tob.InferenceSession(m).run(None, feeds)
    ref = ReferenceEvaluator(m).run(None, feeds)
    assert len(ours) == len(ref)
    for got, want in zip(ours, ref):
        got = np.asarray(got)
        assert got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return ours


def random(rng, *shape):
    return (rng.uniform(0.2, 1.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def nested_loop_model():
    """A Loop whose body runs an If; both read values of enclosing graphs (w from the main graph two
    levels up, acc from the body one level up), the body stops early when its running sum passes
    the main graph's limit, and the loop stacks a scan output."""
    then_branch = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "w"], ["t"])], "then_branch", [], [vi("t", F, [4])])
    else_branch = helper.make_graph(
        [helper.make_node("Sub", ["acc_in", "w"], ["e"])], "else_branch", [], [vi("e", F, [4])])
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["step"], then_branch=then_branch, else_branch=else_branch),
            helper.make_node("Add", ["step", "i_f"], ["acc_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Abs", ["total"], ["size"]),
            helper.make_node("Less", ["size", "limit"], ["cond_out"]),
            helper.make_node("Identity", ["acc_out"], ["scan_out"]),
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [4])],
        [vi("cond_out", B, []), vi("acc_out", F, [4]), vi("scan_out", F, [4])],
        initializer=[helper.make_tensor("two", I64, [], [2]), helper.make_tensor("zero", I64, [], [0])],
    )
    node = helper.make_node("Loop", ["m", "c", "x"], ["acc", "history"], body=body)
    return model([node], [vi("m", I64, []), vi("c", B, []), vi("x", F, [4]), vi("w", F, [4]), vi("limit", F, [])],
                 [vi("acc", F, [4]), vi("history", F, ["iterations", 4])])


@pytest.mark.parametrize("seed", range(6))
def test_nested_loop_and_if_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    m = nested_loop_model()
    sess = tob.InferenceSession(m)
    for trips, limit, cond in [(rng.integers(1, 9), rng.uniform(2, 30), True), (5, 1e9, True), (0, 1e9, True),
                               (4, 1e9, False)]:
        feeds = {"m": np.array(trips, np.int64), "c": np.array(cond), "x": random(rng, 4), "w": random(rng, 4),
                 "limit": np.array(limit, np.float32)}
        acc, history = (np.asarray(v) for v in sess.run(None, feeds))
        if trips == 0 or not cond:  # no iteration (the reference cannot stack zero scan slices)
            np.testing.assert_array_equal(acc, feeds["x"])
            assert history.shape == (0, 4) and history.dtype == np.float32
            continue
        want_acc, want_history = ReferenceEvaluator(m).run(None, feeds)
        assert history.shape == want_history.shape
        np.testing.assert_allclose(acc, want_acc, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(history, want_history, rtol=1e-5, atol=1e-5)


def scan_model(in_axes, in_dirs, out_axes, out_dirs, x_shape, y_shape):
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["x_t", "y_t"], ["p"]),
            helper.make_node("Add", ["s_in", "p"], ["s_out"]),
            helper.make_node("Sin", ["s_out"], ["o1"]),
            helper.make_node("Mul", ["s_out", "x_t"], ["o2"]),
        ],
        "body", [vi("s_in", F, [3]), vi("x_t", F, [3]), vi("y_t", F, [3])],
        [vi("s_out", F, [3]), vi("o1", F, [3]), vi("o2", F, [3])])
    node = helper.make_node("Scan", ["s0", "x", "y"], ["s", "o1s", "o2s"], body=body, num_scan_inputs=2,
                            scan_input_axes=in_axes, scan_input_directions=in_dirs, scan_output_axes=out_axes,
                            scan_output_directions=out_dirs)
    out_shapes = [[5, 3] if axis in (0, -2) else [3, 5] for axis in out_axes]
    return model([node], [vi("s0", F, [3]), vi("x", F, x_shape), vi("y", F, y_shape)],
                 [vi("s", F, [3]), vi("o1s", F, out_shapes[0]), vi("o2s", F, out_shapes[1])], opset=16)


@pytest.mark.parametrize("in_axes, in_dirs, out_axes, out_dirs", [
    ([0, 0], [0, 0], [0, 0], [0, 0]),
    ([1, -2], [1, 0], [1, 0], [0, 1]),
    ([-1, 0], [0, 1], [-1, 1], [1, 1]),
])
def test_scan_axes_and_directions_match_numpy(in_axes, in_dirs, out_axes, out_dirs):
    rng = np.random.default_rng(sum(in_axes) + 3 * sum(out_dirs))
    seq = 5
    # x: [seq, 3] or [3, seq]; y: [seq, 3] or [3, seq], as the axes say.
    x_shape = [seq, 3] if in_axes[0] in (0, -2) else [3, seq]
    y_shape = [seq, 3] if in_axes[1] in (0, -2) else [3, seq]
    m = scan_model(in_axes, in_dirs, out_axes, out_dirs, x_shape, y_shape)
    s0, x, y = random(rng, 3), random(rng, *x_shape), random(rng, *y_shape)
    s, o1s, o2s = tob.InferenceSession(m).run(None, {"s0": s0, "x": x, "y": y})

    def steps(a, axis, reverse):
        a = np.moveaxis(a.astype(np.float64), axis, 0)
        return a[::-1] if reverse else a

    xs, ys = steps(x, in_axes[0], in_dirs[0]), steps(y, in_axes[1], in_dirs[1])
    state, o1, o2 = s0.astype(np.float64), [], []
    for t in range(seq):
        state = state + xs[t] * ys[t]
        o1.append(np.sin(state))
        o2.append(state * xs[t])

    def place(slices, axis, reverse):
        stacked = np.stack(slices[::-1] if reverse else slices)
        return np.moveaxis(stacked, 0, axis)

    np.testing.assert_allclose(s, state, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o1s, place(o1, out_axes[0], out_dirs[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o2s, place(o2, out_axes[1], out_dirs[1]), rtol=1e-5, atol=1e-6)


def test_scan8_sequence_lens_and_directions_match_numpy():
    rng = np.random.default_rng(8)
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "x_t"], ["o"])],
        "body", [vi("s_in", F, [2]), vi("x_t", F, [2])], [vi("s_out", F, [2]), vi("o", F, [2])])
    node = helper.make_node("Scan", ["lens", "s0", "x"], ["s", "os"], body=body, num_scan_inputs=1, directions=[1])
    m = model([node], [vi("lens", I64, [3]), vi("s0", F, [3, 2]), vi("x", F, [3, 4, 2])],
              [vi("s", F, [3, 2]), vi("os", F, [3, 4, 2])], opset=8)
    lens = np.array([4, 1, 3], np.int64)
    s0, x = random(rng, 3, 2), random(rng, 3, 4, 2)
    s, os_ = tob.InferenceSession(m).run(None, {"lens": lens, "s0": s0, "x": x})
    want_s, want_o = np.zeros((3, 2)), np.zeros((3, 4, 2))
    for b in range(3):
        state = s0[b].astype(np.float64)
        for t in range(lens[b]):
            xt = x[b, lens[b] - 1 - t].astype(np.float64)  # reversed within the entry's length
            state = state + xt
            want_o[b, t] = state * xt
        want_s[b] = state
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(os_, want_o, rtol=1e-5, atol=1e-6)


def test_if_returns_the_shape_of_the_branch_it_takes():
    then_branch = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then_branch", [],
                                    [vi("t", F, [6])])
    else_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else_branch", [], [vi("e", F, [3])])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
              [vi("c", B, []), vi("x", F, [3])], [vi("y", F, ["n"])])
    x = random(np.random.default_rng(3), 3)
    for c in (True, False):
        run_both(m, {"c": np.array(c), "x": x})


def test_the_optimized_model_keeps_its_subgraphs_and_runs_the_same(tmp_path):
    """optimized_model_filepath writes the graph the engine ran, subgraphs included: it passes onnx's
    checker and gives the same results, through the reference evaluator too."""
    m = nested_loop_model()
    opts = tob.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = tob.InferenceSession(m, opts)
    rng = np.random.default_rng(11)
    feeds = {"m": np.array(6, np.int64), "c": np.array(True), "x": random(rng, 4), "w": random(rng, 4),
             "limit": np.array(1e9, np.float32)}
    want = sess.run(None, feeds)
    saved = onnx.load(opts.optimized_model_filepath)
    onnx.checker.check_model(saved)
    loops = [n for n in saved.graph.node if n.op_type == "Loop"]
    assert loops and any(a.type == onnx.AttributeProto.GRAPH for a in loops[0].attribute)
    for got in (tob.InferenceSession(saved).run(None, feeds), ReferenceEvaluator(saved).run(None, feeds)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)


# ---- a subgraph of another op ----

@pytest.mark.parametrize("heads, kv_heads", [(2, 2), (4, 2)])
def test_flex_attention_runs_its_modifier_subgraphs(heads, kv_heads):
    """FlexAttention's score_mod (a soft cap reading a constant of its own) and prob_mod run as
    compiled subgraphs on the whole score / probability tensor; against onnx's reference."""
    rng = np.random.default_rng(heads)
    score_mod = helper.make_graph(
        [helper.make_node("Div", ["scores", "cap"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]),
         helper.make_node("Mul", ["t", "cap"], ["scores_out"])],
        "score_mod", [vi("scores", F, ["B", "H", "L", "S"])], [vi("scores_out", F, ["B", "H", "L", "S"])],
        initializer=[helper.make_tensor("cap", F, [], [1.5])])
    prob_mod = helper.make_graph(
        [helper.make_node("Sqrt", ["probs"], ["probs_out"])], "prob_mod", [vi("probs", F, ["B", "H", "L", "S"])],
        [vi("probs_out", F, ["B", "H", "L", "S"])])
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview",
                            score_mod=score_mod, prob_mod=prob_mod)
    g = helper.make_graph([node], "g", [vi("Q", F, [2, heads, 3, 4]), vi("K", F, [2, kv_heads, 5, 4]),
                                        vi("V", F, [2, kv_heads, 5, 6])], [vi("Y", F, [2, heads, 3, 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    feeds = {"Q": random(rng, 2, heads, 3, 4), "K": random(rng, 2, kv_heads, 5, 4), "V": random(rng, 2, kv_heads, 5, 6)}
    run_both(m, feeds)


# ---- errors ----

def test_a_loop_body_with_the_wrong_number_of_inputs_is_named():
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("Neg", ["x"], ["v"])],
                             "body", [vi("i", I64, []), vi("cond_in", B, [])], [vi("cond_out", B, []), vi("v", F, [2])])
    m = model([helper.make_node("Loop", ["m", "", "x"], ["y"], body=body, name="counted")],
              [vi("m", I64, []), vi("x", F, [2])], [vi("y", F, [2])])
    with pytest.raises(tob.InvalidModelError, match=r"Loop node 'counted': body takes 2 inputs; a Loop with 1 "
                                                     r"loop-carried value needs 3"):
        tob.InferenceSession(m)


def test_branches_with_different_output_counts_are_named():
    then_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["a"])], "then_branch", [], [vi("a", F, [2])])
    else_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["b"]), helper.make_node("Abs", ["x"], ["d"])],
                                    "else_branch", [], [vi("b", F, [2]), vi("d", F, [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch, name="pick")
    g = helper.make_graph([node], "g", [vi("c", B, []), vi("x", F, [2])], [vi("y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])  # the checker leaves this to inference
    with pytest.raises(tob.InvalidModelError, match=r"If node 'pick': else_branch has 2 outputs but the node has 1"):
        tob.InferenceSession(m)


def test_scan_inputs_of_different_lengths_are_named_when_the_session_runs():
    body = helper.make_graph([helper.make_node("Add", ["a_t", "b_t"], ["s"]), helper.make_node("Add", ["s", "s_in"],
                                                                                                   ["s_out"])],
                             "body", [vi("s_in", F, [2]), vi("a_t", F, [2]), vi("b_t", F, [2])], [vi("s_out", F, [2])])
    node = helper.make_node("Scan", ["s0", "a", "b"], ["s"], body=body, num_scan_inputs=2, name="scan")
    m = model([node], [vi("s0", F, [2]), vi("a", F, ["n", 2]), vi("b", F, ["k", 2])], [vi("s", F, [2])], opset=16)
    sess = tob.InferenceSession(m)
    rng = np.random.default_rng(4)
    with pytest.raises(tob.EngineError, match=r"Scan node 'scan': scan inputs have different sequence lengths: "
                                               r"input 2 has 4 but input 1 has 3"):
        sess.run(None, {"s0": random(rng, 2), "a": random(rng, 3, 2), "b": random(rng, 4, 2)})


def test_subgraphs_nested_too_deeply_are_refused_by_name():
    depth = tob._engine.C.MAX_SUBGRAPH_NESTING + 1
    inner = helper.make_graph([helper.make_node("Neg", ["x"], ["y0"])], "level0", [], [vi("y0", F, [2])])
    for level in range(1, depth + 1):
        other = helper.make_graph([helper.make_node("Abs", ["x"], [f"z{level}"])], f"other{level}", [],
                                  [vi(f"z{level}", F, [2])])
        node = helper.make_node("If", ["c"], [f"y{level}"], then_branch=inner, else_branch=other, name=f"if{level}")
        inner = helper.make_graph([node], f"level{level}", [], [vi(f"y{level}", F, [2])])
    top = helper.make_model(helper.make_graph(list(inner.node), "g", [vi("c", B, []), vi("x", F, [2])],
                                              [vi(f"y{depth}", F, [2])]),
                            opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(tob.InvalidModelError, match=r"subgraphs nest more than \d+ levels deep"):
        tob.InferenceSession(top)


@pytest.mark.parametrize("elem", [TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1])
def test_packed_sub_byte_values_are_refused_where_control_flow_would_slice_them(elem):
    """Scan slices its scan inputs and Loop stacks its scan outputs a whole number of bytes per
    element; a packed type holds two elements in a byte, so both are refused by name when the
    session is created (never sliced wrongly)."""
    body = helper.make_graph([helper.make_node("Identity", ["x_t"], ["y_t"])], "body", [vi("x_t", elem, [2])],
                             [vi("y_t", elem, [2])])
    scan = model([helper.make_node("Scan", ["xs"], ["ys"], body=body, num_scan_inputs=1, name="scan")],
                 [vi("xs", elem, [3, 2])], [vi("ys", elem, [3, 2])], opset=21)
    with pytest.raises(tob.EngineError, match=r"Scan node 'scan': scan input 0 is (u?int4|float4e2m1): .*packed"):
        tob.InferenceSession(scan)
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("Identity", ["x"], ["slice"])],
                             "body", [vi("i", I64, []), vi("cond_in", B, [])],
                             [vi("cond_out", B, []), vi("slice", elem, [2])])
    loop = model([helper.make_node("Loop", ["m", ""], ["stacked"], body=body, name="loop")],
                 [vi("m", I64, []), vi("x", elem, [2])], [vi("stacked", elem, [None, 2])], opset=21)
    with pytest.raises(tob.EngineError, match=r"Loop node 'loop': scan output 0 is (u?int4|float4e2m1): .*packed"):
        tob.InferenceSession(loop)


# ---------------- sequences and optionals through If and Loop ----------------


def test_loop16_seq_none_matches_its_expected_values_tensor_by_tensor():
    """The onnx case's own expected sequence (its runner cannot compare a sequence whose first
    tensor is 0-d: conformance.KNOWN_DIFFERENCES)."""
    from onnx.backend.test.case.node import collect_testcases

    case = next(c for c in collect_testcases(None) if c.name == "test_loop16_seq_none")
    inputs, expected = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    (got,) = tob.InferenceSession(case.model).run(None, dict(zip(names, inputs)))
    (want,) = expected
    assert isinstance(got, list) and len(got) == len(want) == 6
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_loop_carrying_a_sequence_and_an_if_returning_one_match_numpy(seed):
    """Loop-carried sequence (x * i appended each iteration), a scan output (the running length),
    and an If whose branches return a sequence built from a value of the enclosing graph."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (2, 3)).astype(np.float32)
    seq_t = helper.make_tensor_sequence_value_info
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["x", "fi"], ["row"]),
            helper.make_node("SequenceInsert", ["s_in", "row"], ["s_out"]),
            helper.make_node("SequenceLength", ["s_out"], ["n"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "body",
        [vi("i", I64, []), vi("c_in", B, []), seq_t("s_in", F, [2, 3])],
        [vi("c_out", B, []), seq_t("s_out", F, [2, 3]), vi("n", I64, [])],
    )
    then_g = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["t"])], "then", [], [seq_t("t", F, [2, 3])]
    )
    else_g = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["e"])], "else", [], [seq_t("e", F, [2, 3])])
    m = model(
        [
            helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
            helper.make_node("Loop", ["m", "", "empty"], ["seq", "lens"], body=body),
            helper.make_node("If", ["c"], ["branch"], then_branch=then_g, else_branch=else_g),
            helper.make_node("ConcatFromSequence", ["seq"], ["stacked"], axis=0, new_axis=1),
            helper.make_node("SequenceLength", ["branch"], ["branch_len"]),
        ],
        [vi("x", F, [2, 3]), vi("m", I64, []), vi("c", B, [])],
        [seq_t("seq", F, [2, 3]), vi("lens", I64, [None]), vi("stacked", F, [None, 2, 3]), vi("branch_len", I64, [])],
    )
    for m_val, c_val in [(3, True), (1, False)]:
        feeds = {"x": x, "m": np.array(m_val, np.int64), "c": np.array(c_val)}
        ours = tob.InferenceSession(m).run(None, feeds)
        # float64 numpy (onnx's ReferenceEvaluator fails on this Loop: "need at least one array
        # to concatenate" where its Loop stacks the scan output)
        want_seq = [x.astype(np.float64) * k for k in range(m_val)]
        assert isinstance(ours[0], list) and len(ours[0]) == m_val
        for g, w in zip(ours[0], want_seq):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(ours[1], np.arange(1, m_val + 1, dtype=np.int64))
        np.testing.assert_allclose(ours[2], np.stack(want_seq), rtol=1e-6, atol=1e-6)
        assert int(ours[3]) == (2 if c_val else 1)


def test_a_loop_scan_output_that_is_a_sequence_is_named():
    seq_t = helper.make_tensor_sequence_value_info
    body = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x"], ["s"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [vi("i", I64, []), vi("c_in", B, [])],
        [vi("c_out", B, []), seq_t("s", F, [3])],
    )
    g = helper.make_graph(
        [helper.make_node("Loop", ["m", ""], ["scan"], body=body, name="loop")],
        "g",
        [vi("x", F, [3]), vi("m", I64, [])],
        [vi("scan", F, [None, 3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Exception, match="scan output 0.*must be a tensor"):
        tob.InferenceSession(m)
