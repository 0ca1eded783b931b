"""Shared pieces of the ORTModule tests: a clean slate per test, and ORTModule trained beside its
eager twin with every output, gradient and updated parameter compared."""

from __future__ import annotations

import copy
import gc
import logging
import weakref
from typing import Any, Callable

import torch
from torch import nn

from compile_harness import train_side_by_side
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
    train_side_by_side(eager, wrapped, wrapped, make_batch, steps,
                       lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9), rtol, atol)
    return eager, wrapped


class OwnRegions:
    """The compiled regions (lean_call.live_regions()) a test makes after this is created.
    live_regions() lists every region alive in the process, and in one pytest process an earlier
    test's region may still be (TorchDynamo keeps the compiled function of a frame with a graph
    break as a module global after reset(): docs/torch_compile.md), so a test counts only its own."""

    def __init__(self) -> None:
        from torch_ort_backend.lean_call import live_regions

        gc.collect()
        self._earlier = weakref.WeakSet(live_regions())

    def __call__(self) -> list:
        from torch_ort_backend.lean_call import live_regions

        gc.collect()
        return [r for r in live_regions() if r not in self._earlier]
