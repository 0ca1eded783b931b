"""The exporter at the opsets onnxruntime-training's users exported with (12 in the getting-started
sample, 14 in the ORTModule guidelines, 16 below LayerNormalization): every per-op case of
test_exporter_ops.py compiled at that opset matches eager forward and backward, the model declares
that opset and passes onnx.checker, and ops that exist at the opset stay native."""

import gc

import onnx
import pytest
import torch

from ortmodule_helpers import fresh_state
from test_exporter_ops import CASES, EXPECTED_FALLBACKS, _r
from torch_ort_backend import compiled_graph
from torch_ort_backend.backend import compile_stats, ort_backend

# Ops that do not exist below an opset run as ATen nodes there (exporter/opset_compat.py): case ->
# (the opset the ONNX op appeared at, the ATen ops that fall back below it).
FALLS_BACK_BELOW = {"pad_trilu_cumsum": (14, {"aten.triu.default", "aten.tril.default"})}  # Trilu is opset 14


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    gc.collect()  # graphs of the previous opset, released by dynamo's reset, leave live_graphs()
    yield from fresh_state(monkeypatch)


def _opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


@pytest.mark.parametrize("opset", [12, 14, 16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_at_opset_matches_eager(name, opset):
    fn, make, grads = CASES[name]
    inputs = make()
    ours = [t.clone().requires_grad_(i in grads) for i, t in enumerate(inputs)]
    ref = [t.clone().requires_grad_(i in grads) for i, t in enumerate(inputs)]
    out = torch.compile(fn, backend=ort_backend, options={"opset": opset, "prefer_torch_kernels": []})(*ours)
    exp = fn(*ref)
    torch.testing.assert_close(out, exp, rtol=1e-4, atol=1e-5)
    if grads:
        g = _r(*exp.shape) if exp.dim() else torch.tensor(0.7)
        out.backward(g)
        exp.backward(g)
        for i in grads:
            torch.testing.assert_close(ours[i].grad, ref[i].grad, rtol=1e-4, atol=1e-5, msg=f"grad of input {i}")
    graphs = [g for g in compiled_graph.live_graphs() if g.exported is not None]
    stats = compile_stats()
    assert graphs and stats.fallbacks == 0
    assert stats.runs >= (2 if grads else 1), f"the engine ran {stats.runs} graphs: {stats}"
    for g in graphs:
        assert _opset_of(g.exported.model) == opset
        onnx.checker.check_model(g.exported.model)
    expected = set(EXPECTED_FALLBACKS.get(name, (set(), ""))[0])
    below, ops = FALLS_BACK_BELOW.get(name, (0, set()))
    if opset < below:
        expected |= ops
    assert set(compile_stats().aten_fallback_ops) == expected, dict(compile_stats().aten_fallback_ops)

def test_softmax_on_a_middle_axis_at_opset_12_transposes():
    """Opset 12's Softmax flattens to 2-D at `axis`; on a middle axis that is a different function,
    so the exporter moves the axis last around it."""
    x = _r(2, 5, 3)
    f = torch.compile(lambda t: t.softmax(1) + t.log_softmax(1), backend=ort_backend, options={"opset": 12})
    torch.testing.assert_close(f(x), x.softmax(1) + x.log_softmax(1), rtol=1e-5, atol=1e-6)
    (g,) = [g for g in compiled_graph.live_graphs() if g.exported is not None]
    ops = [n.op_type for n in g.exported.model.graph.node]
    assert "Transpose" in ops and "Softmax" in ops and "LogSoftmax" in ops
    assert not compile_stats().aten_fallback_ops
