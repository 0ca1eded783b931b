"""Dropout on an input that is not contiguous (a transpose, a channels-last conv output) masks the same
elements as eager under the same seed: torch draws dropout's random numbers in the input's memory
order, and the engine hands its ATen node a contiguous tensor, so the exporter runs the node on the
input transposed into that order (graph_exporter._random_op_memory_order). Reference: eager PyTorch,
forward and gradients, with torch.manual_seed set alike before each side."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from torch_ort_backend import compile_stats
from torch_ort_backend.exporter.graph_exporter import _random_op_memory_order

from ortmodule_helpers import assert_engine_ran, fresh_state


@pytest.fixture
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


class TransposedDropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(12, 12)
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.lin(x).transpose(1, 2)) * 1.5


class ChannelsLastDropout(nn.Module):
    """A conv on a channels-last input gives a channels-last output, as SegFormer's decode head's
    concatenation of permuted features does in eager."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.drop = nn.Dropout(0.25)
        self.head = nn.Conv2d(16, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(torch.relu(self.conv(x.contiguous(memory_format=torch.channels_last)))))


CASES = {
    "transposed": (TransposedDropout, lambda g: torch.randn(4, 10, 12, generator=g)),
    "channels_last": (ChannelsLastDropout, lambda g: torch.randn(2, 8, 9, 7, generator=g)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dropout_masks_match_eager_on_non_contiguous_inputs(strict, case):
    make, batch = CASES[case]
    torch.manual_seed(0)
    eager = make().train()
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, backend="ort")
    g = torch.Generator().manual_seed(7)
    for step in range(2):
        x = batch(g)
        torch.manual_seed(100 + step)
        ye = eager(x)
        torch.manual_seed(100 + step)
        yo = compiled(x)
        torch.testing.assert_close(yo, ye, rtol=1e-5, atol=1e-5)
        ye.square().sum().backward()
        yo.square().sum().backward()
        for (name, pe), po in zip(eager.named_parameters(), twin.parameters()):
            torch.testing.assert_close(po.grad, pe.grad, rtol=1e-4, atol=1e-5, msg=f"step {step}: {name}.grad")
        eager.zero_grad(set_to_none=True)
        twin.zero_grad(set_to_none=True)
    assert_engine_ran(min_runs=4)
    assert compile_stats().aten_fallback_ops["aten.native_dropout.default"] >= 1


def _dropout_node(x_meta: torch.Tensor) -> torch.fx.Node:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = x_meta
    return graph.call_function(torch.ops.aten.native_dropout.default, (x, 0.5, True))


def test_memory_order_of_the_dropout_input():
    aten = torch.ops.aten
    base = torch.empty(2, 3, 4, 5)
    assert _random_op_memory_order(aten.native_dropout.default, _dropout_node(base)) is None
    cl = base.contiguous(memory_format=torch.channels_last)
    assert _random_op_memory_order(aten.native_dropout.default, _dropout_node(cl)) == [0, 2, 3, 1]
    assert _random_op_memory_order(aten.native_dropout.default, _dropout_node(base.transpose(0, 3))) == [3, 1, 2, 0]
    # Not dense (a strided slice): no order to follow, the node keeps its input as it is.
    assert _random_op_memory_order(aten.native_dropout.default, _dropout_node(base[:, :, ::2])) is None
    # bernoulli.p draws in logical order whatever the layout (checked against torch below).
    assert _random_op_memory_order(aten.bernoulli.p, _dropout_node(cl)) is None
    torch.manual_seed(3)
    a = torch.bernoulli(torch.full((2, 3, 4, 5), 0.5).contiguous(memory_format=torch.channels_last))
    torch.manual_seed(3)
    b = torch.bernoulli(torch.full((2, 3, 4, 5), 0.5))
    assert torch.equal(a, b)
    torch.manual_seed(3)
    c, _ = aten.native_dropout.default(torch.ones(2, 3, 4, 5).contiguous(memory_format=torch.channels_last), 0.5, True)
    torch.manual_seed(3)
    d, _ = aten.native_dropout.default(torch.ones(2, 4, 5, 3), 0.5, True)
    assert torch.equal(c, d.permute(0, 3, 1, 2))


@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
def test_reading_the_layout_does_not_specialise_dynamic_sizes(strict, transposed):
    """Reading the dropout input's strides must not guard on its sizes: int() on a symbolic size
    fixed it, so every new sequence length recompiled (then ran in eager past the recompile limit)
    and mark_dynamic raised ConstraintViolationError."""
    lin = nn.Linear(16, 16)

    def f(x):
        h = lin(x)
        h = h.transpose(1, 2) if transposed else h
        return torch.nn.functional.dropout(h, 0.1, training=True).sum(-1)

    compiled = torch.compile(f, backend="ort")
    x = torch.randn(2, 7, 16)
    torch._dynamo.mark_dynamic(x, 1)
    torch.manual_seed(4)
    ye = f(x)
    torch.manual_seed(4)
    torch.testing.assert_close(compiled(x), ye, rtol=1e-5, atol=1e-6)
    first = compile_stats().graphs  # the forward and the backward
    for n in range(5, 13):  # they serve every length: no recompile
        compiled(torch.randn(2, n, 16))
    assert compile_stats().graphs == first, compile_stats()
    assert compile_stats().recompile_limit_fallbacks == 0
    assert_engine_ran(min_runs=9)
