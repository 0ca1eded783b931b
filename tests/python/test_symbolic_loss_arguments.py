"""Loss arguments that arrive as graph values (issue 18): an int argument that keeps changing
becomes a SymInt after TorchDynamo's second value (automatic dynamic shapes), so the graph sees
`ignore_index` as a value, not a constant. ONNX's NegativeLogLikelihoodLoss takes it as an
attribute; the export must still work (it failed with "int() argument must be ... not 'Val'" and the
graph ran in eager), give eager's loss and gradients for every value, run natively, and not
re-export for every new value.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ortmodule_helpers import assert_engine_ran, fresh_state
from torch_ort_backend import ORTModule, compile_stats


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


# Each value of ignore_index: the default, a class that occurs in the targets, another that does,
# and one that does not occur.
IGNORE_VALUES = (-100, 2, 0, 7)


def _targets() -> torch.Tensor:
    return torch.tensor([0, 2, 3, 1, 2, 3, 0, 2])


def _logits(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 4, generator=g) * 2


def _check(fn, *extra) -> None:
    """fn(x, ignore_index, *extra) compiled by "ort" against eager, for every ignore_index value."""
    compiled = torch.compile(fn, backend="ort")
    for ignore in IGNORE_VALUES:
        x, xr = _logits().requires_grad_(), _logits().requires_grad_()
        out, ref = compiled(x, ignore, *extra), fn(xr, ignore, *extra)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6, msg=f"loss, ignore_index={ignore}")
        g = torch.linspace(0.5, 1.5, out.numel()).view(out.shape)
        out.backward(g)
        ref.backward(g)
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-6, msg=f"gradient, ignore_index={ignore}")
    stats = compile_stats()
    assert_engine_ran(len(IGNORE_VALUES))
    # The first value is a constant, the second makes it a SymInt; every later value reuses that graph.
    assert stats.exports <= 4, f"{stats.exports} exports for {len(IGNORE_VALUES)} values of ignore_index"
    assert not any("nll_loss" in op for op in stats.aten_fallback_ops), dict(stats.aten_fallback_ops)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_with_symbolic_ignore_index(reduction: str) -> None:
    weight = torch.tensor([0.5, 1.5, 1.0, 2.0])
    _check(lambda x, ignore, w: F.cross_entropy(x, _targets(), weight=w, ignore_index=ignore, reduction=reduction),
           weight)


def test_cross_entropy_with_symbolic_ignore_index_and_label_smoothing() -> None:
    _check(lambda x, ignore: F.cross_entropy(x, _targets(), ignore_index=ignore, label_smoothing=0.2))


def test_nll_loss_with_symbolic_ignore_index() -> None:
    _check(lambda x, ignore: F.nll_loss(F.log_softmax(x, 1), _targets(), ignore_index=ignore))


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, target, ignore_index):
        return nn.CrossEntropyLoss(ignore_index=ignore_index)(self.lin(x), target)


def test_ortmodule_loss_with_changing_ignore_index() -> None:
    torch.manual_seed(0)
    eager = Classifier()
    model = ORTModule(Classifier())
    model.load_state_dict(eager.state_dict())
    for ignore in IGNORE_VALUES:
        x = _logits(ignore % 5)
        loss, ref = model(x, _targets(), ignore), eager(x, _targets(), ignore)
        torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
        loss.backward()
        ref.backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
    assert_engine_ran(len(IGNORE_VALUES))
    assert compile_stats().exports <= 4
