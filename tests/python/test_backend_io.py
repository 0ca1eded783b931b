"""What crosses the backend boundary: registration, nested outputs, Python scalars and SymInts as
inputs, inference graphs, dynamic shapes reusing one session, zero-copy outputs, saved models."""

import copy
import os
import subprocess
import sys

import onnx
import pytest
import torch
import torch.nn as nn

from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend.backend import compile_stats


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def test_entry_point_registers_ort_and_onnxrt_without_import():
    """After pip install, "ort" and "onnxrt" are in torch._dynamo.list_backends() in a fresh
    interpreter that never imports torch_ort_backend."""
    code = ("import sys, torch; names = torch._dynamo.list_backends(); "
            "assert 'torch_ort_backend' not in sys.modules; print('ort' in names, 'onnxrt' in names)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


def test_string_backend_name_runs_our_backend():
    f = torch.compile(lambda x: torch.tanh(x) * 3, backend="ort")
    x = torch.randn(5, 7)
    torch.testing.assert_close(f(x), torch.tanh(x) * 3)
    assert compile_stats().runs == 1


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 6)

    def forward(self, x, scale: float, n: int):
        h = self.lin(x) * scale
        return {"h": h[:, :n], "pair": (h.sum(), [h.exp(), None]), "rows": x.shape[0]}


def test_nested_outputs_scalars_and_gradients_match_eager():
    """Dict/tuple/list outputs with None and a Python int, float and int arguments (which recompile
    as SymInt/SymFloat graph inputs); outputs and gradients equal eager's for changing values."""
    torch.manual_seed(0)
    model = Nested()
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="ort")
    for scale, n in ((0.5, 3), (1.5, 4), (2.5, 5)):
        x = torch.randn(4, 8)
        out, exp = compiled(x, scale, n), ref(x, scale, n)
        torch.testing.assert_close(out["h"], exp["h"])
        torch.testing.assert_close(out["pair"][0], exp["pair"][0])
        torch.testing.assert_close(out["pair"][1][0], exp["pair"][1][0])
        assert out["pair"][1][1] is None and out["rows"] == 4
        (out["pair"][0] + out["h"].sum()).backward()
        (exp["pair"][0] + exp["h"].sum()).backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert compile_stats().runs >= 3 and compile_stats().fallbacks == 0


def test_no_grad_compiles_an_inference_graph():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 3))
    compiled = torch.compile(model, backend="ort")
    x = torch.randn(6, 10)
    with torch.no_grad():
        out = compiled(x)
    torch.testing.assert_close(out, model(x).detach())
    assert not out.requires_grad
    from torch_ort_backend.compile_state import live_graphs

    assert any(g.stage == "inference" for g in live_graphs())
    assert_engine_ran(1)


def test_dynamic_sequence_lengths_reuse_one_session():
    """After two sequence lengths (dynamo's automatic dynamic shapes), further lengths run the same
    session: no new export and no new session."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    compiled = torch.compile(layer, backend="ort")
    with torch.no_grad():
        for t in (5, 7):
            x = torch.randn(2, t, 16)
            torch.testing.assert_close(compiled(x), layer(x), rtol=1e-4, atol=1e-5)
        exports, sessions = compile_stats().exports, compile_stats().sessions_created
        for t in (9, 12, 3):
            x = torch.randn(2, t, 16)
            torch.testing.assert_close(compiled(x), layer(x), rtol=1e-4, atol=1e-5)
    assert (compile_stats().exports, compile_stats().sessions_created) == (exports, sessions)
    assert_engine_ran(5)


def test_mark_dynamic_exports_dim_params():
    """torch._dynamo.mark_dynamic makes the exported input carry a dim_param, not a fixed size."""
    f = torch.compile(lambda x: (x * 2).sum(-1), backend="ort")
    x = torch.randn(3, 11)
    torch._dynamo.mark_dynamic(x, 1)
    torch.testing.assert_close(f(x), (x * 2).sum(-1))
    from torch_ort_backend import compiled_graph

    graphs = [g for g in compiled_graph.live_graphs() if g.exported is not None]
    tensor_inputs = [i for i in graphs[-1].exported.model.graph.input if len(i.type.tensor_type.shape.dim) == 2]
    dims = tensor_inputs[0].type.tensor_type.shape.dim
    assert dims[0].dim_value == 3 and dims[1].dim_param
    assert_engine_ran(1)


def test_outputs_share_engine_memory_and_inputs_are_not_copied():
    """Outputs are torch tensors viewing engine memory (no copy), inputs are read in place."""
    f = torch.compile(lambda x: x + 1, backend="ort")
    x = torch.randn(1000)
    y = f(x)
    torch.testing.assert_close(y, x + 1)
    assert y.is_contiguous() and y.data_ptr() != x.data_ptr()
    x2 = torch.randn(1000)
    y2 = f(x2)
    torch.testing.assert_close(y2, x2 + 1)
    torch.testing.assert_close(y, x + 1)  # the first result is still alive and intact
    assert_engine_ran(2)


def test_save_onnx_writes_exported_and_optimized_models(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid())
    compiled = torch.compile(model, backend="ort",
                             options={"save_onnx": True, "onnx_prefix": "tiny", "save_path": str(tmp_path)})
    compiled(torch.randn(2, 4)).sum().backward()
    assert_engine_ran(2)
    names = sorted(os.listdir(tmp_path))
    assert any(n.startswith("tiny_forward") and n.endswith("_exported.onnx") for n in names), names
    assert any(n.startswith("tiny_backward") and n.endswith("_optimized.onnx") for n in names), names
    for n in names:
        onnx.checker.check_model(onnx.load(str(tmp_path / n)))
