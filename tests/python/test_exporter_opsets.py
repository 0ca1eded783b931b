"""The exporter at the opsets onnxruntime-training's users exported with (12 in the getting-started
sample, 14 in the ORTModule guidelines, 16 below LayerNormalization): every per-op case of
test_exporter_ops.py compiled at that opset matches eager forward and backward, the model declares
that opset and passes onnx.checker, and ops that exist at the opset stay native."""

import gc

import onnx
import pytest
import torch

from ortmodule_helpers import fresh_state
from test_exporter_ops import CASES, EXPECTED_FALLBACKS, _r, check_case
from torch_ort_backend import compiled_graph
from torch_ort_backend.backend import compile_stats, ort_backend

# Ops that do not exist below an opset run as ATen nodes there (exporter/opset_compat.py): case ->
# (the opset the ONNX op appeared at, the ATen ops that fall back below it).
FALLS_BACK_BELOW = {
    "pad_trilu_cumsum": (14, {"aten.triu.default", "aten.tril.default"}),  # Trilu is opset 14
    "grid_sample": (16, {"aten.grid_sampler_2d.default"}),  # GridSample is opset 16
}


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    gc.collect()  # graphs of the previous opset, released by dynamo's reset, leave live_graphs()
    yield from fresh_state(monkeypatch)


def _opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


@pytest.mark.parametrize("opset", [12, 14, 16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_at_opset_matches_eager(name, opset):
    expected = set(EXPECTED_FALLBACKS.get(name, (set(), ""))[0])
    below, ops = FALLS_BACK_BELOW.get(name, (0, set()))
    if opset < below:
        expected |= ops
    for g in check_case(name, {"opset": opset, "prefer_torch_kernels": []}, expected):
        assert _opset_of(g.exported.model) == opset


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
