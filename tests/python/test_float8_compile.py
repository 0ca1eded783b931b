"""8-bit floats through torch.compile(backend="ort"): graph inputs and outputs of the four float8
types, casts to and from them with torch's rounding and overflow rules (e4m3fn clamps to its largest
finite value, e5m2 overflows to inf, the fnuz types to NaN), and a training step on a float8 input.
Reference: eager PyTorch, bit for bit for the casts. The export declares opset 19 (ONNX's first
with float8) and refuses an opset below 18 by name."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import torch_ort_backend  # noqa: F401  (registers the backend)
from torch_ort_backend import compile_stats
from torch_ort_backend.exporter import export_fx_graph

from ortmodule_helpers import assert_engine_ran, fresh_state

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz]


@pytest.fixture
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)  # FALLBACK_DISABLE: a fallback would raise


def _values() -> torch.Tensor:
    g = torch.Generator().manual_seed(11)
    normal = torch.randn(64, generator=g) * 3
    tiny = torch.randn(16, generator=g) * 1e-3  # subnormals of the 4-bit-exponent types
    edges = torch.tensor([0.0, -0.0, 448.0, 460.0, 500.0, -1000.0, 57344.0, 61440.0, 1e6, -1e6,
                          float("inf"), float("-inf"), float("nan"), 0.5, 0.0625, 240.0])
    return torch.cat([normal, tiny, edges])


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_casts_to_float8_and_back_match_torch_bit_for_bit(strict, dtype):
    def f(x, scale):
        q = (x * scale).to(dtype)
        return q, q.to(torch.float32) * 0.5

    x, scale = _values(), torch.tensor(1.0)
    eq, ey = f(x, scale)
    oq, oy = torch.compile(f, backend="ort")(x, scale)
    assert oq.dtype == dtype
    # Bit for bit, but for NaN's payload: e5m2's NaN is 0x7E in ONNX's Cast (the engine's rule,
    # csrc/core/low_precision.h) and 0x7F in torch; both decode to NaN.
    nan = eq.to(torch.float32).isnan()
    assert torch.equal(oq.to(torch.float32).isnan(), nan)
    same = _bits(oq) == _bits(eq)
    assert bool((same | nan).all()), (x[~(same | nan)], oq[~(same | nan)], eq[~(same | nan)])
    torch.testing.assert_close(oy, ey, equal_nan=True, rtol=0, atol=0)
    assert_engine_ran(min_runs=1)


class Float8Input(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 8)

    def forward(self, x8: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x8.to(torch.float32)))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_training_on_a_float8_input_matches_eager(strict, dtype):
    torch.manual_seed(0)
    eager = Float8Input()
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, backend="ort")
    x8 = torch.randn(6, 16, generator=torch.Generator().manual_seed(2)).to(dtype)
    ye, yo = eager(x8), compiled(x8)
    torch.testing.assert_close(yo, ye, rtol=1e-5, atol=1e-6)
    ye.square().sum().backward()
    yo.square().sum().backward()
    for (name, pe), po in zip(eager.named_parameters(), twin.parameters()):
        torch.testing.assert_close(po.grad, pe.grad, rtol=1e-5, atol=1e-6, msg=name)
    assert_engine_ran(min_runs=2)
    assert compile_stats().fallbacks == 0


def _graph_of(fn, *args) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn, tracing_mode="fake")(*args)
    return gm


def test_export_declares_opset_19_and_refuses_below_18():
    gm = _graph_of(lambda x: x.to(torch.float8_e5m2).to(torch.float32), torch.randn(4))
    model = export_fx_graph(gm, opset=18).model
    assert [o.version for o in model.opset_import if o.domain == ""] == [19]
    with pytest.raises(Exception, match="8-bit floats.*opset 19.*export opset is 17"):
        export_fx_graph(gm, opset=17)
    plain = _graph_of(lambda x: x * 2, torch.randn(4))
    assert [o.version for o in export_fx_graph(plain, opset=18).model.opset_import if o.domain == ""] == [18]
