"""TorchDynamo's recompile limit (issue 18): past `recompile_limit` compilations of one function,
dynamo runs it in eager PyTorch for good. For a function compiled by "ort" that must not pass
unnoticed: one FallbackWarning naming the function and the limit, counted in compile_stats(); the
results stay eager's either way. Functions compiled by other backends draw nothing from us.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from ortmodule_helpers import fresh_state
from torch_ort_backend import FallbackWarning, ORTModule, compile_stats

LIMIT = 2


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    with torch._dynamo.config.patch(recompile_limit=LIMIT):
        yield from fresh_state(monkeypatch)


def scale_by_name(x: torch.Tensor, name: str) -> torch.Tensor:
    # A str argument is a guarded constant: every new value recompiles.
    return x * len(name) + 1


def _calls(fn, n: int) -> list[warnings.WarningMessage]:
    x = torch.arange(4.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(n):
            torch.testing.assert_close(fn(x, "n" * k), scale_by_name(x, "n" * k))
    return [w for w in caught if issubclass(w.category, FallbackWarning)]


def test_ort_function_past_the_limit_warns_once() -> None:
    caught = _calls(torch.compile(scale_by_name, backend="ort"), 2 * LIMIT + 2)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert f"recompile_limit ({LIMIT})" in message
    code = scale_by_name.__code__
    assert f"'scale_by_name' ({code.co_filename}:{code.co_firstlineno})" in message
    stats = compile_stats()
    assert stats.recompile_limit_fallbacks == 1
    assert stats.runs == LIMIT and stats.fallbacks == 0  # the engine ran the calls dynamo compiled


def test_other_backends_draw_no_warning() -> None:
    assert _calls(torch.compile(scale_by_name, backend="eager"), 2 * LIMIT + 2) == []
    assert compile_stats().recompile_limit_fallbacks == 0


class Moded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, mode: str):
        y = self.lin(x)
        return y * len(mode)


def test_ortmodule_past_the_limit_warns_once_naming_forward() -> None:
    model = ORTModule(Moded())
    x = torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(2 * LIMIT + 2):
            out = model(x, "m" * k)
            torch.testing.assert_close(out, model.original_module(x, "m" * k))
    ours = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    code = Moded.forward.__code__
    assert f"'forward' ({code.co_filename}:{code.co_firstlineno})" in str(ours[0].message)
    assert compile_stats().recompile_limit_fallbacks == 1
