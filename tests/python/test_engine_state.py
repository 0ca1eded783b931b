"""Session state: graph inputs bound to torch tensors / numpy arrays that each run updates in their
own memory (InferenceSession.bind_state, SessionOptions.state_updates)."""

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

import torch_ort_backend as tob
from conftest import nonzero
from torch_ort_backend.session import SessionOptions

MS = "com.microsoft"


def make_model(nodes, inputs, outputs, ms_opset=True):
    """inputs / outputs: (name, TensorProto type, shape) triples."""
    graph = helper.make_graph(
        nodes,
        "state",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(MS, 1)] if ms_opset else [])
    return helper.make_model(graph, opset_imports=opsets)


def session(model, updates):
    opts = SessionOptions()
    opts.state_updates = updates
    return tob.InferenceSession(model, opts)


def sgd_by_onnx_ops(shape):
    """W_new = W - lr * G with standard ops (kernels that do not compute in place)."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Mul", ["lr", "G"], ["step"]), helper.make_node("Sub", ["W", "step"], ["W_new"])]
    return make_model(nodes, [("lr", f, []), ("W", f, shape), ("G", f, shape)], [("W_new", f, shape)], ms_opset=False)


def test_bound_torch_tensor_is_updated_in_its_own_memory(rng):
    sess = session(sgd_by_onnx_ops([3, 4]), {"W": "W_new"})
    assert updated_in_place(sess) == set(), "Sub does not compute in place: the update is copied in"
    w = torch.from_numpy(nonzero(rng, (3, 4)))
    expected = w.clone()
    ptr = w.data_ptr()
    sess.bind_state("W", w)
    for _ in range(3):
        g = torch.from_numpy(nonzero(rng, (3, 4)))
        (w_new,) = sess.run(None, {"lr": np.float32(0.1), "G": g})
        expected -= 0.1 * g
        torch.testing.assert_close(w_new, expected)
    assert w.data_ptr() == ptr
    torch.testing.assert_close(w, expected)
    state = sess.get_state("W")
    assert isinstance(state, torch.Tensor) and state.data_ptr() == ptr


def test_bound_numpy_array_is_updated_and_frozen_inputs_stay(rng):
    f = TensorProto.FLOAT
    # W_new = W + B * G: B is bound without an update (a frozen value).
    nodes = [helper.make_node("Mul", ["B", "G"], ["BG"]), helper.make_node("Add", ["W", "BG"], ["W_new"])]
    model = make_model(nodes, [("W", f, [5]), ("B", f, [5]), ("G", f, [5])], [("W_new", f, [5])], ms_opset=False)
    sess = session(model, {"W": "W_new"})
    w, b = nonzero(rng, 5), nonzero(rng, 5)
    w0, b0 = w.copy(), b.copy()
    sess.bind_state("W", w)
    sess.bind_state("B", b)
    g = nonzero(rng, 5)
    sess.run(None, {"G": g})
    sess.run(None, {"G": g})
    np.testing.assert_allclose(w, w0 + 2 * b0 * g, rtol=1e-6)
    np.testing.assert_array_equal(b, b0)
    assert sess.get_state("W") is not w and np.shares_memory(sess.get_state("W"), w)


def test_state_errors_name_the_culprit(rng):
    sess = session(sgd_by_onnx_ops([4]), {"W": "W_new"})
    with pytest.raises(ValueError, match="state 'W': expected dtype float32, got float64"):
        sess.bind_state("W", torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="state 'W': dimension 0 must be 4"):
        sess.bind_state("W", torch.zeros(5))
    with pytest.raises(ValueError, match="state 'W': the tensor must be contiguous"):
        sess.bind_state("W", torch.zeros(4, 2)[:, 0])
    with pytest.raises(ValueError, match="state 'W': the numpy array must be C-contiguous and writeable"):
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        sess.bind_state("W", ro)
    with pytest.raises(ValueError, match="state 'W': expected a torch tensor or numpy array"):
        sess.bind_state("W", [0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="unknown input 'V'"):
        sess.bind_state("V", torch.zeros(4))
    with pytest.raises(ValueError, match="input 'W' has no bound state"):
        sess.get_state("W")
    sess.bind_state("W", torch.zeros(4))
    g = torch.from_numpy(nonzero(rng, 4))
    with pytest.raises(ValueError, match="input 'W' is bound as session state"):
        sess.run(None, {"lr": np.float32(0.1), "G": g, "W": torch.zeros(4)})


def test_state_updates_option_is_validated():
    opts = SessionOptions()
    with pytest.raises(ValueError, match="state_updates must be a dict"):
        opts.state_updates = [("W", "W_new")]
    with pytest.raises(ValueError, match="entry 'W': 3 must map a graph input name to a graph output name"):
        opts.state_updates = {"W": 3}
    model = sgd_by_onnx_ops([4])
    with pytest.raises(ValueError, match="'step' is not a graph output"):
        session(model, {"W": "step"})
    with pytest.raises(ValueError, match="'V' is not a graph input; the graph inputs are 'lr', 'W', 'G'"):
        session(model, {"V": "W_new"})
    with pytest.raises(ValueError, match="the state is float32\\[4\\] but the update is float32\\[\\]"):
        f = TensorProto.FLOAT
        m = make_model([helper.make_node("Mul", ["lr", "lr"], ["sq"])], [("lr", f, []), ("W", f, [4])],
                       [("sq", f, [])], ms_opset=False)
        session(m, {"W": "sq"})


# ---- a whole training step in one graph: Linear + MSE, gradients by hand, optimizer ops ----

IN, OUT, BATCH = 6, 3, 8
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def linear_mse_graph():
    """Nodes computing loss = mean((x W^T + b - t)^2) and its gradients dW, db with standard ops."""
    n = BATCH * OUT
    nodes = [
        helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1),
        helper.make_node("Sub", ["y", "t"], ["r"]),
        helper.make_node("Mul", ["r", "r"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
        helper.make_node("Constant", [], ["two_over_n"], value=helper.make_tensor("c", F32, [], [2.0 / n])),
        helper.make_node("Mul", ["r", "two_over_n"], ["dy"]),
        helper.make_node("Gemm", ["dy", "x"], ["dW"], transA=1),
        helper.make_node("Constant", [], ["axis0"], value=helper.make_tensor("a", I64, [1], [0])),
        helper.make_node("ReduceSum", ["dy", "axis0"], ["db"], keepdims=0),
    ]
    inputs = [("x", F32, [BATCH, IN]), ("t", F32, [BATCH, OUT]), ("lr", F32, []), ("W", F32, [OUT, IN]), ("b", F32, [OUT])]
    return nodes, inputs


PARAMS = {"W": [OUT, IN], "b": [OUT]}


def adam_model(attrs, clip):
    nodes, inputs = linear_mse_graph()
    outputs, updates = [("loss", F32, [])], {}
    if clip:
        nodes.append(helper.make_node("ReduceAllL2", ["dW", "db"], ["norm"], domain=MS))
    for p, shape in PARAMS.items():
        states = {f"{p}_T": (I64, []), f"{p}_m1": (F32, shape), f"{p}_m2": (F32, shape)}
        inputs += [(name, t, s) for name, (t, s) in states.items()]
        ins = ["lr", f"{p}_T", p, f"d{p}", f"{p}_m1", f"{p}_m2"] + (["", "", "norm"] if clip else [])
        outs = [f"{p}_T_new", f"{p}_m1_new", f"{p}_m2_new", f"{p}_new"]
        nodes.append(helper.make_node("AdamOptimizer", ins, outs, domain=MS, **attrs))
        for state, out in zip([f"{p}_T", f"{p}_m1", f"{p}_m2", p], outs):
            updates[state] = out
            t, s = (I64, []) if state.endswith("_T") else (F32, shape)
            outputs.append((out, t, s))
    return make_model(nodes, inputs, outputs), updates


def sgd_model():
    nodes, inputs = linear_mse_graph()
    outputs, updates = [("loss", F32, [])], {}
    for p, shape in PARAMS.items():
        nodes.append(helper.make_node("SGDOptimizer", ["lr", p, f"d{p}"], [f"{p}_new"], domain=MS))
        updates[p] = f"{p}_new"
        outputs.append((f"{p}_new", F32, shape))
    return make_model(nodes, inputs, outputs), updates


def data(rng, steps):
    return [(torch.from_numpy(nonzero(rng, (BATCH, IN))), torch.from_numpy(nonzero(rng, (BATCH, OUT))))
            for _ in range(steps)]


def bind_params(sess, rng, with_moments=False):
    """Engine-side parameters and optimizer state as torch tensors bound to the session; returns
    them and a torch.nn.Linear holding copies of the same initial values."""
    state = {"W": torch.from_numpy(nonzero(rng, (OUT, IN))), "b": torch.from_numpy(nonzero(rng, (OUT,)))}
    model = torch.nn.Linear(IN, OUT)
    with torch.no_grad():
        model.weight.copy_(state["W"])
        model.bias.copy_(state["b"])
    if with_moments:
        for p, shape in PARAMS.items():
            state[f"{p}_T"] = torch.ones((), dtype=torch.int64)  # 1-based index of the next update
            state[f"{p}_m1"] = torch.zeros(shape)
            state[f"{p}_m2"] = torch.zeros(shape)
    for name, tensor in state.items():
        sess.bind_state(name, tensor)
    return state, model


def torch_step(model, opt, x, t, clip):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), t)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.detach()


def updated_in_place(sess):
    """The states the session's plan updates in place (the rest are copied in after each run)."""
    return {line.split("'")[1] for line in sess._session.log() if ": updated in place by" in line}


def run_side_by_side(sess, state, model, opt, batches, lr, clip=False):
    assert updated_in_place(sess) == set(state), "every parameter and optimizer state is written in place"
    ptrs = {name: t.data_ptr() for name, t in state.items()}
    for x, t in batches:
        engine_loss = sess.run(["loss"], {"x": x, "t": t, "lr": np.float32(lr)})[0]
        torch.testing.assert_close(engine_loss, torch_step(model, opt, x, t, clip), rtol=1e-5, atol=1e-6)
    assert {name: t.data_ptr() for name, t in state.items()} == ptrs, "states must stay in their own memory"
    torch.testing.assert_close(state["W"], model.weight.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state["b"], model.bias.detach(), rtol=1e-5, atol=1e-5)


def test_sgd_training_step_matches_torch_sgd(rng):
    model_proto, updates = sgd_model()
    sess = session(model_proto, updates)
    state, model = bind_params(sess, rng)
    w0 = state["W"].clone()
    run_side_by_side(sess, state, model, torch.optim.SGD(model.parameters(), lr=0.1), data(rng, 4), 0.1)
    assert not torch.equal(state["W"], w0)


@pytest.mark.parametrize("lambda_coef,clip", [(0.0, False), (0.0, True), (0.05, False), (0.05, True)])
def test_adam_decay_before_update_matches_torch_adam_and_adamw(rng, lambda_coef, clip):
    attrs = {"alpha": 0.8, "beta": 0.95, "epsilon": 1e-7, "lambda": lambda_coef, "weight_decay_mode": 0}
    model_proto, updates = adam_model(attrs, clip)
    sess = session(model_proto, updates)
    state, model = bind_params(sess, rng, with_moments=True)
    optim = torch.optim.Adam if lambda_coef == 0 else torch.optim.AdamW
    opt = optim(model.parameters(), lr=0.05, betas=(0.8, 0.95), eps=1e-7, weight_decay=lambda_coef)
    run_side_by_side(sess, state, model, opt, data(rng, 5), 0.05, clip)
    assert int(state["W_T"]) == 6
    torch.testing.assert_close(state["W_m1"], opt.state[model.weight]["exp_avg"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(state["W_m2"], opt.state[model.weight]["exp_avg_sq"], rtol=1e-5, atol=1e-7)


def test_adam_decay_after_update_matches_transformers_adamw_formula(rng):
    """weight_decay_mode 1 has no torch optimizer: a float64 reference of transformers' AdamW."""
    lr, a, b, eps, lam = 0.05, 0.9, 0.99, 1e-6, 0.1
    attrs = {"alpha": a, "beta": b, "epsilon": eps, "lambda": lam, "weight_decay_mode": 1}
    model_proto, updates = adam_model(attrs, clip=False)
    sess = session(model_proto, updates)
    state, _ = bind_params(sess, rng, with_moments=True)
    ref = {p: state[p].double().clone() for p in PARAMS}
    m = {p: torch.zeros_like(ref[p]) for p in PARAMS}
    v = {p: torch.zeros_like(ref[p]) for p in PARAMS}
    for step, (x, t) in enumerate(data(rng, 3), start=1):
        sess.run(["loss"], {"x": x, "t": t, "lr": np.float32(lr)})
        xd, td = x.double(), t.double()
        dy = 2 * (xd @ ref["W"].T + ref["b"] - td) / dy_count()
        grads = {"W": dy.T @ xd, "b": dy.sum(0)}
        for p in PARAMS:
            m[p] = a * m[p] + (1 - a) * grads[p]
            v[p] = b * v[p] + (1 - b) * grads[p] ** 2
            step_size = lr * (1 - b**step) ** 0.5 / (1 - a**step)
            ref[p] = ref[p] - step_size * m[p] / (v[p].sqrt() + eps)
            ref[p] = ref[p] - lr * lam * ref[p]
    for p in PARAMS:
        torch.testing.assert_close(state[p].double(), ref[p], rtol=1e-5, atol=1e-6)


def dy_count():
    return BATCH * OUT


def lamb_model(attrs, clip):
    nodes, inputs = linear_mse_graph()
    inputs += [("step", I64, [])]
    outputs, updates = [("loss", F32, []), ("step_new", I64, [])], {"step": "step_new"}
    if clip:
        nodes.append(helper.make_node("ReduceAllL2", ["dW", "db"], ["norm"], domain=MS))
    ins, outs = ["", "", "norm" if clip else "", "lr", "step"], ["step_new"]
    for k, (p, shape) in enumerate(PARAMS.items()):
        inputs += [(f"{p}_m1", F32, shape), (f"{p}_m2", F32, shape)]
        ins += [p, f"d{p}", f"{p}_m1", f"{p}_m2"] + ([""] if k + 1 < len(PARAMS) else [])
        outs += [f"{p}_new", "", f"{p}_m1_new", f"{p}_m2_new"] + ([""] if k + 1 < len(PARAMS) else [])
        for state in (p, f"{p}_m1", f"{p}_m2"):
            updates[state] = state.replace(p, f"{p}_new", 1) if state == p else f"{state}_new"
            outputs.append((updates[state], F32, shape))
    nodes.append(helper.make_node("LambOptimizer", ins, outs, domain=MS, **attrs))
    return make_model(nodes, inputs, outputs), updates


@pytest.mark.parametrize("clip", [False, True])
def test_lamb_training_step_matches_float64_reference(rng, clip):
    lr, a, b, eps, lam, rmin, rmax = 0.02, [0.9, 0.85], [0.999, 0.98], [1e-6, 1e-5], [0.01, 0.0], 0.2, 5.0
    attrs = {"alpha": a, "beta": b, "epsilon": eps, "lambda": lam, "ratio_min": rmin, "ratio_max": rmax}
    model_proto, updates = lamb_model(attrs, clip)
    sess = session(model_proto, updates)
    state, _ = bind_params(sess, rng)
    for p, shape in PARAMS.items():
        state[f"{p}_m1"], state[f"{p}_m2"] = torch.zeros(shape), torch.zeros(shape)
        sess.bind_state(f"{p}_m1", state[f"{p}_m1"])
        sess.bind_state(f"{p}_m2", state[f"{p}_m2"])
    state["step"] = torch.ones((), dtype=torch.int64)
    sess.bind_state("step", state["step"])
    ptrs = {name: t.data_ptr() for name, t in state.items()}
    assert updated_in_place(sess) == set(state)
    ref = {p: state[p].double().clone() for p in PARAMS}
    m = {p: torch.zeros_like(ref[p]) for p in PARAMS}
    v = {p: torch.zeros_like(ref[p]) for p in PARAMS}
    for step, (x, t) in enumerate(data(rng, 3), start=1):
        sess.run(["loss"], {"x": x, "t": t, "lr": np.float32(lr)})
        xd, td = x.double(), t.double()
        dy = 2 * (xd @ ref["W"].T + ref["b"] - td) / dy_count()
        grads = {"W": dy.T @ xd, "b": dy.sum(0)}
        norm = torch.sqrt(sum((g**2).sum() for g in grads.values()))
        divisor = max(1.0, float(norm)) if clip else 1.0  # max_norm_clip 1, no loss scale
        for k, p in enumerate(PARAMS):
            g = grads[p] / divisor
            m[p] = a[k] * m[p] + (1 - a[k]) * g
            v[p] = b[k] * v[p] + (1 - b[k]) * g**2
            d = lam[k] * ref[p] + (m[p] / (1 - a[k] ** step)) / ((v[p] / (1 - b[k] ** step)).sqrt() + eps[k])
            ratio = lr * min(max(float(ref[p].norm() / d.norm()), rmin), rmax)
            ref[p] = ref[p] - ratio * d
    assert {name: t.data_ptr() for name, t in state.items()} == ptrs
    assert int(state["step"]) == 4
    for p in PARAMS:
        torch.testing.assert_close(state[p].double(), ref[p], rtol=1e-5, atol=1e-6)


def test_gradient_accumulation_in_engine_state(rng):
    """acc += dW over three runs (InPlaceAccumulator, in place); update_signal false leaves it."""
    nodes, inputs = linear_mse_graph()
    inputs += [("acc", F32, [OUT, IN]), ("accumulate", TensorProto.BOOL, [])]
    nodes += [helper.make_node("InPlaceAccumulator", ["acc", "dW", "accumulate"], ["acc_new"], domain=MS)]
    model_proto = make_model(nodes, inputs, [("loss", F32, []), ("acc_new", F32, [OUT, IN])])
    sess = session(model_proto, {"acc": "acc_new"})
    assert updated_in_place(sess) == {"acc"}
    state, model = bind_params(sess, rng)
    acc = torch.zeros(OUT, IN)
    sess.bind_state("acc", acc)
    expected = torch.zeros(OUT, IN)
    for x, t in data(rng, 3):
        sess.run(["loss"], {"x": x, "t": t, "lr": np.float32(0), "accumulate": np.bool_(True)})
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), t).backward()
        expected += model.weight.grad
    torch.testing.assert_close(acc, expected, rtol=1e-5, atol=1e-6)
    before = acc.clone()
    x, t = data(rng, 1)[0]
    sess.run(["loss"], {"x": x, "t": t, "lr": np.float32(0), "accumulate": np.bool_(False)})
    assert torch.equal(acc, before)
    assert sess.get_state("acc").data_ptr() == acc.data_ptr()


def test_optimizer_attribute_errors_name_the_node():
    model_proto, updates = adam_model({"weight_decay_mode": 3}, clip=False)
    with pytest.raises(ValueError, match="AdamOptimizer node .*weight_decay_mode must be 0"):
        session(model_proto, updates)
    model_proto, updates = lamb_model({"alpha": [0.9]}, clip=False)
    with pytest.raises(ValueError, match="attribute 'alpha' has 1 values for 2 weight groups"):
        session(model_proto, updates)


def test_accumulation_then_update_and_reset_with_two_sessions_sharing_state(rng):
    """Gradient accumulation as onnxruntime-training ran it, on state shared by two sessions: the
    accumulate graph sums dW, db into buffers; the update graph adds the last micro-batch, takes an
    SGD step with the sums and resets them (InPlaceAccumulator then ZeroGradient: both write the
    buffer's own memory). Compared with torch accumulating .grad over the same micro-batches."""
    nodes, inputs = linear_mse_graph()
    acc_inputs = inputs + [(f"acc_{p}", F32, s) for p, s in PARAMS.items()]
    accumulate = nodes + [helper.make_node("InPlaceAccumulator", [f"acc_{p}", f"d{p}"], [f"acc_{p}_new"], domain=MS)
                          for p in PARAMS]
    acc_model = make_model(accumulate, acc_inputs, [("loss", F32, [])] + [(f"acc_{p}_new", F32, s)
                                                                          for p, s in PARAMS.items()])
    update = list(accumulate)
    outputs, update_states = [("loss", F32, [])], {}
    for p, shape in PARAMS.items():
        update.append(helper.make_node("SGDOptimizer", ["lr", p, f"acc_{p}_new"], [f"{p}_new"], domain=MS))
        update.append(helper.make_node("ZeroGradient", [f"acc_{p}_new", f"{p}_new"], [f"acc_{p}_zero"], domain=MS))
        update_states.update({p: f"{p}_new", f"acc_{p}": f"acc_{p}_zero"})
        outputs += [(f"{p}_new", F32, shape), (f"acc_{p}_zero", F32, shape)]
    acc_sess = session(acc_model, {f"acc_{p}": f"acc_{p}_new" for p in PARAMS})
    upd_sess = session(make_model(update, acc_inputs, outputs), update_states)
    assert updated_in_place(acc_sess) == {"acc_W", "acc_b"}
    assert updated_in_place(upd_sess) == {"W", "b", "acc_W", "acc_b"}
    state, model = bind_params(upd_sess, rng)
    acc = {f"acc_{p}": torch.zeros(s) for p, s in PARAMS.items()}
    for name, tensor in {**state, **acc}.items():
        upd_sess.bind_state(name, tensor)
        acc_sess.bind_state(name, tensor)
    ptrs = {name: t.data_ptr() for name, t in {**state, **acc}.items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):  # two updates of three micro-batches each
        opt.zero_grad()
        for micro, (x, t) in enumerate(data(rng, 3)):
            sess = upd_sess if micro == 2 else acc_sess
            engine_loss = sess.run(["loss"], {"x": x, "t": t, "lr": np.float32(0.1)})[0]
            loss = torch.nn.functional.mse_loss(model(x), t)
            loss.backward()
            torch.testing.assert_close(engine_loss, loss.detach(), rtol=1e-5, atol=1e-6)
        opt.step()
        torch.testing.assert_close(state["W"], model.weight.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(state["b"], model.bias.detach(), rtol=1e-5, atol=1e-6)
        assert all(not t.any() for t in acc.values()), "the update graph resets the sums"
    assert {name: t.data_ptr() for name, t in {**state, **acc}.items()} == ptrs
