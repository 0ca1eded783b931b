"""Shared pieces of the ORTModule tests: a clean slate per test, and ORTModule trained beside its
eager twin with every output, gradient and updated parameter compared."""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable

import torch
from torch import nn

from compile_harness import _call, _compare_gradients, _compare_outputs, _compare_parameters, extract_loss
from torch_ort_backend import ORTModule, compile_stats

RTOL, ATOL = 1e-4, 1e-5


def fresh_state(monkeypatch, strict: bool = True):
    """Dynamo's caches and the backend's counters reset; ORTMODULE_* variables cleared (FALLBACK_DISABLE
    when `strict`, so that a silent fallback to eager cannot make a test pass); the logger's level and
    handlers restored afterwards. A generator for a fixture."""
    import os

    for var in [v for v in os.environ if v.startswith("ORTMODULE_")]:
        monkeypatch.delenv(var)
    if strict:
        monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    logger = logging.getLogger("torch_ort_backend")
    level, handlers = logger.level, list(logger.handlers)
    torch._dynamo.reset()
    compile_stats().reset()
    yield
    torch._dynamo.reset()
    logger.setLevel(level)
    logger.handlers[:] = handlers


def assert_engine_ran(min_runs: int = 1) -> None:
    stats = compile_stats()
    assert stats.runs >= min_runs, f"the engine ran {stats.runs} graphs, expected at least {min_runs}: {stats}"
    assert stats.fallbacks == 0, f"a graph fell back to eager: {stats}"


def train_beside_eager(make_model: Callable[[], nn.Module], make_batch: Callable[[int], Any], steps: int = 3,
                       wrap: Callable[[nn.Module], nn.Module] = ORTModule, lr: float = 0.05,
                       rtol: float = RTOL, atol: float = ATOL) -> tuple[nn.Module, nn.Module]:
    """Trains make_model() in eager PyTorch and wrap(its deepcopy) with SGD side by side; asserts at
    every step that the outputs, every parameter's gradient and the updated parameters match.
    Returns (eager, wrapped)."""
    eager = make_model()
    wrapped = wrap(copy.deepcopy(eager))
    eager.train()
    wrapped.train()
    eager_opt = torch.optim.SGD(eager.parameters(), lr=lr, momentum=0.9)
    wrapped_opt = torch.optim.SGD(wrapped.parameters(), lr=lr, momentum=0.9)
    for step in range(steps):
        batch = make_batch(step)
        eager_opt.zero_grad(set_to_none=True)
        wrapped_opt.zero_grad(set_to_none=True)
        eager_out, wrapped_out = _call(eager, batch), _call(wrapped, batch)
        _compare_outputs(eager_out, wrapped_out, f"step {step} forward", rtol, atol)
        extract_loss(eager_out).backward()
        extract_loss(wrapped_out).backward()
        if _compare_gradients(eager, wrapped, step, rtol, atol) == 0:
            raise AssertionError(f"step {step}: no parameter received a gradient")
        eager_opt.step()
        wrapped_opt.step()
        _compare_parameters(eager, wrapped, step, rtol, atol)
    return eager, wrapped
