"""Outputs that get no gradient (torch_ort_backend/zero_tangents.py, lean_call.py): the lean training
path lets autograd hand their gradients over as None instead of materialising zeros, and runs a
variant of the backward graph built without those tangents, once per distinct set of them. Each
test checks the gradients against eager PyTorch and against AOTAutograd's own path (lean_call off,
where the zeros are materialised and added): equal (torch.equal) to the latter; and that the
engine ran the variant."""

import copy

import pytest
import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

from ortmodule_helpers import OwnRegions, assert_engine_ran, fresh_state
from torch_ort_backend import memory_stats
from torch_ort_backend.backend import compile_stats
from torch_ort_backend.zero_tangents import without_tangents

aten = torch.ops.aten


_OWN: list = []  # the running test's OwnRegions


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    for _ in fresh_state(monkeypatch):
        _OWN[:] = [OwnRegions()]
        yield


def _nonzero(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(*shape, generator=g) * 1.9 + 0.1
    return t * torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)


class ThreeHeads(nn.Module):
    """A trunk and three differentiable outputs: a loss-like scalar, the logits it is computed from
    (so the logits' gradient adds to the loss's, as a language model's does) and a second head."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.trunk = nn.Linear(8, 16)
        self.head = nn.Linear(16, 6)
        self.aux = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        logits = self.head(h)
        loss = torch.log_softmax(logits, -1)[:, 0].mean()
        return loss, logits, self.aux(h).exp()


def _losses(outs, used):
    loss, logits, aux = outs
    total = loss
    if "logits" in used:
        total = total + (logits.square() * 0.3).sum()
    if "aux" in used:
        total = total + aux.mean()
    return total


def _region():
    regions = [r for r in _OWN[0]() if not r.inference]
    assert len(regions) == 1, f"expected one training region, found {len(regions)}"
    return regions[0]


def _train(uses, seed=0):
    """Eager, lean and AOTAutograd's path side by side, one step per entry of ``uses`` (the outputs
    the step backpropagates besides the loss); per step the three sets of parameter gradients."""
    eager = ThreeHeads(seed)
    lean_model, aot_model = copy.deepcopy(eager), copy.deepcopy(eager)
    lean = torch.compile(lean_model, backend="ort")
    aot = torch.compile(aot_model, backend="ort", options={"lean_call": False})
    steps = []
    for step, used in enumerate(uses):
        x = _nonzero(5, 8, seed=seed + step)
        grads = []
        for model, fn in ((eager, eager), (lean_model, lean), (aot_model, aot)):
            model.zero_grad(set_to_none=True)
            _losses(fn(x), used).backward()
            grads.append({n: p.grad for n, p in model.named_parameters()})
        steps.append(grads)
    return steps


def _assert_same(steps, uses):
    for step, ((want, got, aot), used) in enumerate(zip(steps, uses)):
        assert want.keys() == got.keys() == aot.keys()
        for name in want:
            if want[name] is None:  # a head no loss reached: eager leaves its gradient undefined
                assert got[name] is None or not got[name].any(), (step, used, name)
                continue
            torch.testing.assert_close(got[name], want[name], msg=f"step {step} {used} {name}")
            assert torch.equal(got[name], aot[name]), f"step {step} {used} {name}: lean != AOTAutograd's path"


def test_unused_outputs_run_a_backward_without_their_tangents():
    uses = [(), (), (), ()]
    steps = _train(uses)
    _assert_same(steps, uses)
    region = _region()
    assert region.lean_calls == 3  # the first call is AOTAutograd's, with zeros materialised
    variants = region.backward_variants
    assert list(variants) == [(1, 2)], variants  # the logits and the aux head: tangents 1 and 2
    variant = variants[(1, 2)]
    backward = next(g for g in region.graphs if g.stage == "backward")
    assert variant.num_inputs == backward.num_inputs - 2
    assert variant.memory.runs == 3 and not variant.eager
    # the zero is gone, not made: no zeros node, the logits' gradient is the loss's
    targets = {n.target for n in variant.gm.graph.nodes}
    assert aten.zeros.default not in targets
    adds = sum(1 for n in variant.gm.graph.nodes if n.target is aten.add.Tensor)
    assert adds < sum(1 for n in backward.gm.graph.nodes if n.target is aten.add.Tensor)
    # the aux head's parameters, which only the unused outputs read, get no gradient (None), as in eager
    eager_grads, lean_grads, _ = steps[-1]
    assert eager_grads["aux.weight"] is None and lean_grads["aux.weight"] is None
    assert_engine_ran(2 * 4 * 2)


def test_all_outputs_used_runs_the_full_backward():
    uses = [("logits", "aux")] * 3
    _assert_same(_train(uses), uses)
    region = _region()
    assert region.lean_calls == 2
    assert region.backward_variants == {}
    assert_engine_ran(2 * 3 * 2)


def test_outputs_used_in_some_calls_only():
    """A variant per distinct set of missing tangents, built once; the full graph where all came."""
    uses = [(), ("logits",), (), ("logits", "aux"), ("aux",), (), ("logits",)]
    _assert_same(_train(uses), uses)
    region = _region()
    assert sorted(region.backward_variants) == [(1,), (1, 2), (2,)]
    # steps 2, 5 (no logits, no aux); 4 (no logits); 1, 6 (no aux): each variant's runs
    runs = {k: g.memory.runs for k, g in region.backward_variants.items()}
    assert runs == {(1, 2): 2, (1,): 1, (2,): 2}, runs
    assert_engine_ran(2 * 7 * 2)


def test_memory_stats_count_the_variant_that_ran_last():
    """A backward graph and its variants are one graph to memory_stats(): the last run's figures."""
    model = ThreeHeads()
    fn = torch.compile(model, backend="ort")
    x = _nonzero(64, 8)
    for used in [("logits", "aux"), ("logits", "aux"), ()]:
        _losses(fn(x), used).backward()
    region = _region()
    variant = region.backward_variants[(1, 2)]
    backward = next(g for g in region.graphs if g.stage == "backward")
    # memory_stats() covers every graph alive in the process (an earlier test's may be), so this
    # region's backward is read from its own entries under "graphs": of it and its variant, the one
    # that ran last
    graphs = memory_stats()["graphs"]
    assert variant.name in graphs and backward.name not in graphs, sorted(graphs)
    assert graphs[variant.name]["step_peak_bytes"] == variant.memory.step_peak_bytes
    _losses(fn(x), ("logits", "aux")).backward()
    graphs = memory_stats()["graphs"]
    assert backward.name in graphs and variant.name not in graphs, sorted(graphs)
    assert graphs[backward.name]["step_peak_bytes"] == backward.memory.step_peak_bytes


def test_no_output_with_a_gradient_gives_no_gradients():
    """Autograd reaches the region with every tangent None (a custom function downstream returns
    None): no input gets a gradient, as in eager (AOTAutograd's path would give zeros)."""

    class Blocks(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, g):
            return None

    eager = ThreeHeads()
    model = copy.deepcopy(eager)
    fn = torch.compile(model, backend="ort")
    w = torch.ones(3, requires_grad=True)
    for step in range(3):
        for m, f in ((eager, eager), (model, fn)):
            m.zero_grad(set_to_none=True)
            w.grad = None
            loss, logits, aux = f(_nonzero(5, 8, seed=step))
            (Blocks.apply(loss) + (w * 3).sum()).backward()
            assert w.grad is not None
            if m is eager or step > 0:  # the first call is AOTAutograd's: zeros
                assert all(p.grad is None for p in m.parameters()), (step, m is eager)
    assert _region().lean_calls == 2


def _traced(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def test_without_tangents_simplifies_and_matches_zeros():
    """The graph rewrite itself, against the function run with a zero tangent (eager, float32):
    add / sub of a zero become the other operand, zero-preserving ops (view, mul, matmul, sum,
    transpose) stay zeros, an op that does not give zeros from zeros (exp) reads a real zero."""

    def fn(x, w, t, u):
        a = x + t.view(4, 6)  # add of a zero: x
        b = (t * x.view(2, 12)).sum(0)  # mul, then sum: zeros, returned as None
        c = torch.mm(w, t.view(6, 4).t())  # view, t, mm: zeros
        d = x - c  # sub of a zero: x
        e = u.exp() + a.sum()  # exp reads a real zero, then broadcasts a scalar on it
        f = c.t().neg() * 2.0  # zeros, read by a reader that needs them real: cat
        return a, b, d, e, torch.cat([f.t(), x])

    x, w = _nonzero(4, 6, seed=1), _nonzero(4, 4, seed=2)
    t, u = _nonzero(2, 12, seed=3), _nonzero(5, seed=4)
    gm = _traced(fn, x, w, t, u)
    variant = without_tangents(gm, [2, 3])
    placeholders = [n for n in variant.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 2
    targets = [n.target for n in variant.graph.nodes]
    assert targets.count(aten.zeros.default) == 2  # exp's operand and cat's
    assert aten.mm.default not in targets and aten.sub.Tensor not in targets and aten.neg.default not in targets
    want = fn(x, w, torch.zeros_like(t), torch.zeros_like(u))
    got = variant(x, w)
    assert got[1] is None and not want[1].any()
    for i in (0, 2, 3, 4):
        assert torch.equal(got[i], want[i]), i
        assert got[i].shape == want[i].shape and got[i].dtype == want[i].dtype


def test_without_tangents_keeps_a_broadcasting_add():
    """add(x, 0) where x is smaller than the result is not x: the zero stays, made real."""

    def fn(x, t):
        return (x + t,)

    x, t = _nonzero(6, seed=1), _nonzero(4, 6, seed=2)
    variant = without_tangents(_traced(fn, x, t), [1])
    assert aten.zeros.default in [n.target for n in variant.graph.nodes]
    assert torch.equal(variant(x)[0], fn(x, torch.zeros_like(t))[0])


def test_without_tangents_refuses_a_position_that_is_not_a_tensor_input():
    gm = _traced(lambda x, t: (x * t,), _nonzero(3), _nonzero(3))
    with pytest.raises(ValueError, match="input 5 is not a tensor placeholder"):
        without_tangents(gm, [5])


def test_a_variant_that_cannot_be_built_falls_back_to_zeros(monkeypatch, caplog):
    """A rewrite that fails is named in a warning; the full graph runs with zero tangents."""
    import torch_ort_backend.zero_tangents as zt

    def broken(gm, positions):
        raise ValueError("no variant today")

    monkeypatch.setattr(zt, "without_tangents", broken)
    uses = [(), (), ()]
    with caplog.at_level("WARNING", logger="torch_ort_backend"):
        _assert_same(_train(uses), uses)
    assert "no variant today" in caplog.text
    assert _region().backward_variants == {(1, 2): None}
    assert compile_stats().fallbacks == 0
