"""Helpers of the PythonOp tests: compile with "ort" (fallback disabled, so a silent eager fallback
cannot make a test pass), compare outputs and gradients with eager, and count the PythonOp /
PythonOpGrad nodes of the graphs the engine ran."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import torch

from torch_ort_backend.compiled_graph import live_graphs

RTOL, ATOL = 1e-4, 1e-5
_first_serial = [0]


def compile_ort(fn: Callable, dynamic: bool | None = None, **options: Any) -> Callable:
    """torch.compile(fn, backend="ort") from a clean TorchDynamo state; python_op_nodes() and
    graph_count() then describe this compile only."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    _first_serial[0] = max((g.serial for g in live_graphs()), default=0) + 1
    return torch.compile(fn, backend="ort", dynamic=dynamic, options=options or None)


def random_input(shape, *, requires_grad: bool = False, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """Uniform magnitudes in [0.2, 1.5) with random signs: never zero."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.rand(shape, generator=g, dtype=torch.float64) * 1.3 + 0.2
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    return (mag * sign).to(dtype).requires_grad_(requires_grad)


def clone_inputs(inputs: list) -> list:
    return [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
            for x in inputs]


def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def loss_of(out: Any) -> torch.Tensor:
    """A scalar that weighs every element of every differentiable output differently."""
    total = 0
    for i, t in enumerate(_tensors(out)):
        if t.requires_grad:
            w = torch.linspace(0.5, 1.5, t.numel(), dtype=t.dtype).reshape(t.shape) * (i + 1)
            total = total + (t * w).sum()
    return total


def assert_close(actual, expected, what: str) -> None:
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def engine_counters() -> tuple[int, int]:
    """(graphs the engine ran, graphs that fell back to eager) so far in this process."""
    from torch_ort_backend import compile_stats

    stats = compile_stats()
    return stats.runs, stats.fallbacks


def assert_engine_ran_since(before: tuple[int, int]) -> None:
    """Since engine_counters() was `before`, the engine ran at least one graph and none fell back to
    eager: a comparison with eager is then not one of eager with itself."""
    runs, fallbacks = engine_counters()
    assert runs > before[0], "the engine ran no graph (TorchDynamo may have run it all in eager)"
    assert fallbacks == before[1], f"{fallbacks - before[1]} graph(s) fell back to eager"


def check_against_eager(fn: Callable, compiled: Callable, inputs: list, params: list | None = None,
                        backward: bool = True) -> Any:
    """Runs fn eagerly and `compiled` on copies of the inputs; outputs and the gradients of every
    input and parameter that requires grad must match, and the engine must have run the compiled
    call. Returns the compiled outputs."""
    params = params or []
    eager_in, comp_in = clone_inputs(inputs), clone_inputs(inputs)
    for p in params:
        p.grad = None
    out_e = fn(*eager_in)
    grads_e = []
    if backward:
        loss_of(out_e).backward()
        grads_e = [p.grad.clone() for p in params]
        for p in params:
            p.grad = None
    before = engine_counters()
    out_c = compiled(*comp_in)
    assert_engine_ran_since(before)
    te, tc = _tensors(out_e), _tensors(out_c)
    assert len(te) == len(tc), f"{len(tc)} outputs, eager has {len(te)}"
    for i, (a, b) in enumerate(zip(tc, te)):
        assert_close(a.detach(), b.detach(), f"output {i}")
        assert a.requires_grad == b.requires_grad, f"output {i}: requires_grad {a.requires_grad} vs eager"
    if backward:
        loss_of(out_c).backward()
        for i, (a, b) in enumerate(zip(comp_in, eager_in)):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                assert_close(a.grad, b.grad, f"gradient of input {i}")
        for i, (p, g) in enumerate(zip(params, grads_e)):
            assert_close(p.grad, g, f"gradient of parameter {i}")
    return out_c


def current_graphs() -> list:
    """The engine graphs (CompiledGraph) of the last compile_ort."""
    return [g for g in live_graphs() if g.exported is not None and g.serial >= _first_serial[0]]


def python_op_nodes() -> Counter:
    """PythonOp / PythonOpGrad nodes of the engine graphs of the last compile_ort, by (op type, the
    Function's qualified name): func_name without the random token of this process's own graphs
    (``pkg.mod.Fn@<token>``, test_python_op_contract.py checks its form)."""
    counts: Counter = Counter()
    for g in current_graphs():
        for node in g.exported.model.graph.node:
            if node.op_type in ("PythonOp", "PythonOpGrad"):
                name = next(a.s.decode() for a in node.attribute if a.name == "func_name")
                counts[(node.op_type, name.split("@")[0])] += 1
    return counts


def graph_count() -> int:
    """Graphs TorchDynamo compiled since the last compile_ort (graph breaks add graphs)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
