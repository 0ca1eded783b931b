"""A graph whose trace needs a data-dependent output size (a boolean-mask assignment's gradient calls
nonzero) goes back to TorchDynamo, which breaks the graph there as it does for Inductor, instead of
failing the compile (an error under FALLBACK_DISABLE, before) or sending the whole region to eager.
Reference: eager PyTorch, forward and gradients."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from torch_ort_backend import compile_stats

from ortmodule_helpers import assert_engine_ran, fresh_state


@pytest.fixture
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)  # FALLBACK_DISABLE: a fallback would raise
    # TorchDynamo installs the graph-broken frame's compiled function and resume function in this
    # module's globals, and its reset() leaves them there: they would keep this test's compiled
    # graphs alive (live_graphs(), memory_stats()) into later tests. Emptied, not deleted: TorchDynamo
    # deletes each name itself once the code that uses it is freed.
    for name in [n for n in globals() if n.startswith(("__compiled_fn", "__resume_at"))]:
        globals()[name] = None


class MaskedEmbed(nn.Module):
    """Wav2Vec2's SpecAugment in small: masked time steps take a learned vector."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.masked_embed = nn.Parameter(torch.randn(8))
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.proj(x) * 2.0
        torch._dynamo.graph_break()  # the projection is a graph of its own, which the engine runs
        h[mask] = self.masked_embed
        return self.head(torch.tanh(h))


def test_data_dependent_gradient_breaks_the_graph_instead_of_failing(strict):
    torch.manual_seed(0)
    eager = MaskedEmbed()
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, backend="ort")
    g = torch.Generator().manual_seed(3)
    for _ in range(2):
        x = torch.randn(4, 6, 8, generator=g)
        mask = torch.rand(4, 6, generator=g) < 0.4
        ye, yo = eager(x, mask), compiled(x, mask)
        torch.testing.assert_close(yo, ye, rtol=1e-5, atol=1e-6)
        ye.square().sum().backward()
        yo.square().sum().backward()
        for (name, pe), po in zip(eager.named_parameters(), twin.parameters()):
            torch.testing.assert_close(po.grad, pe.grad, rtol=1e-5, atol=1e-6, msg=name)
        eager.zero_grad(set_to_none=True)
        twin.zero_grad(set_to_none=True)
    assert_engine_ran(min_runs=2)
    assert compile_stats().fallbacks == 0
