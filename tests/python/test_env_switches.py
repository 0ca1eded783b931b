"""The engine's TOB_* developer switches (docs/architecture.md, "Engine switches"): a value a switch
does not accept is refused by name, in torch.compile(backend="ort") as a BadInitializationError
(not a silent eager fallback: FALLBACK_BAD_INITIALIZATION is outside the default policy) and in
InferenceSession as a ValueError; an accepted value compiles and runs on the engine like eager."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import torch_ort_backend as tob
from torch_ort_backend import compile_stats
from ortmodule_helpers import assert_engine_ran


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    compile_stats().reset()
    yield
    torch._dynamo.reset()


def _neg_model() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("variable,value", [("TOB_ROTARY_FUSION", "off"), ("TOB_SGEMM", "2"),
                                            ("TOB_QGEMM", "vnni"), ("TOB_CONV_PACKED", "true")])
def test_compile_refuses_a_bad_switch_by_name(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    model = nn.Linear(4, 3)
    compiled = torch.compile(model, backend="ort")
    with pytest.raises(Exception) as info:
        compiled(torch.randn(2, 4))
    text = "".join(str(e) for e in _chain(info.value))
    assert f"{variable}='{value}' is not a value it accepts" in text, text
    assert any(isinstance(e, tob.BadInitializationError) for e in _chain(info.value)), info.value
    assert compile_stats().fallbacks == 0


def test_inference_session_refuses_a_bad_switch(monkeypatch):
    monkeypatch.setenv("TOB_ELEMENTWISE_FUSION", "no")
    with pytest.raises(ValueError, match=r"TOB_ELEMENTWISE_FUSION='no' is not a value it accepts \('0' or '1'"):
        tob.InferenceSession(_neg_model())


_ROOT = Path(__file__).resolve().parents[2]
# Every switch the engine's table knows (csrc/core/env_switch.cc is the one place that lists them).
_SWITCHES = sorted(set(re.findall(r'"(TOB_[A-Z0-9_]+)"', (_ROOT / "csrc/core/env_switch.cc").read_text())))


def test_the_switch_table_is_read():
    assert len(_SWITCHES) >= 15 and "TOB_ELEMENTWISE_FUSION" in _SWITCHES, _SWITCHES


@pytest.mark.parametrize("variable", _SWITCHES)
def test_every_switch_refuses_a_bad_value_and_is_documented(monkeypatch, variable):
    monkeypatch.setenv(variable, "maybe")
    with pytest.raises(ValueError, match=rf"{variable}='maybe' is not a value it accepts"):
        tob.InferenceSession(_neg_model())
    rows = [line for line in (_ROOT / "docs/architecture.md").read_text().splitlines() if line.lstrip().startswith("|")]
    assert any(f"`{variable}`" in row.split("|")[1] for row in rows), (
        f"{variable} is missing from docs/architecture.md's switch table")


@pytest.mark.parametrize("value", ["0", "1", ""])
def test_accepted_values_run_on_the_engine(monkeypatch, value):
    monkeypatch.setenv("TOB_ELEMENTWISE_FUSION", value)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
    x = torch.randn(5, 4)
    out = torch.compile(model, backend="ort")(x)
    torch.testing.assert_close(out, model(x), rtol=1e-6, atol=1e-6)
    assert_engine_ran()
    sess = tob.InferenceSession(_neg_model())
    v = torch.randn(3)
    torch.testing.assert_close(torch.tensor(sess.run(["y"], {"x": v.numpy()})[0]), -v)


def _chain(e: BaseException):
    while e is not None:
        yield e
        e = e.__cause__ or e.__context__




def test_a_switch_read_at_session_creation_is_part_of_the_session_cache_key(monkeypatch):
    """Identical exports share one engine session; a pass switch changed between two compiles of
    the same graph must get a session built with it, not the cached one."""
    from torch_ort_backend.compiled_graph import live_graphs

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.SiLU())
    x = torch.randn(5, 4)

    def fused_nodes(value: str) -> tuple[int, object]:
        monkeypatch.setenv("TOB_ELEMENTWISE_FUSION", value)
        torch._dynamo.reset()
        before = set(live_graphs())
        with torch.no_grad():
            out = torch.compile(model, backend="ort")(x)
            torch.testing.assert_close(out, model(x), rtol=1e-6, atol=1e-6)
        (graph,) = [g for g in live_graphs() if g not in before and g.session is not None]
        ops = [n["op_type"] for n in graph.session._session.optimized_graph()["nodes"]]
        return ops.count("FusedElementwise"), graph.session

    on, on_session = fused_nodes("1")
    off, off_session = fused_nodes("0")
    assert on >= 1 and off == 0, (on, off)
    assert on_session is not off_session
    assert_engine_ran()
