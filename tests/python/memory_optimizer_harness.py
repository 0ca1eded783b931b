"""Shared pieces of the memory optimizer tests: a model trained a few steps under torch.compile(backend
"ort") with given options, its losses, every gradient, the engine's memory and the Memory Optimizer
report it logged."""

from __future__ import annotations

import copy
import gc
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

import torch_ort_backend
from torch_ort_backend import compile_stats
from torch_ort_backend.compiled_graph import live_graphs
from torch_ort_backend.memory_optimizer import report as report_module

REPLAY_OP = "tob_memopt.native_dropout_replaying_rng_state.default"


@dataclass
class Run:
    losses: list = field(default_factory=list)
    grads: list = field(default_factory=list)  # per step: {name: grad}
    memory: dict = field(default_factory=dict)  # torch_ort_backend.memory_stats() after the last step
    reports: list = field(default_factory=list)  # Memory Optimizer reports logged (text)
    warnings: list = field(default_factory=list)  # the reports logged at WARNING
    replayed_dropouts: int = 0  # backward ATen nodes replaying a dropout's random numbers
    pass_lines: list = field(default_factory=list)  # backward sessions' applied_passes() lines of `pass_prefix`


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def train(model: nn.Module, make_batch: Callable[[int], dict], options: dict | None, steps: int = 2,
          seed: int = 1234, pass_prefix: str | None = None) -> Run:
    """Trains a deepcopy of `model` (train mode) `steps` steps with SGD under torch.compile("ort",
    options); the random stream is seeded with `seed` first, so dropout masks depend on it alone.
    With `pass_prefix`, run.pass_lines are the backward sessions' lines of that engine pass (read
    while the compiled model is alive)."""
    torch._dynamo.reset()
    gc.collect()  # the graphs of an earlier run leave memory_stats()
    compile_stats().reset()
    model = copy.deepcopy(model).train()
    compiled = torch.compile(model, backend="ort", options=options or {})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    logger = logging.getLogger("torch_ort_backend")
    handler, level = _Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    run = Run()
    try:
        torch.manual_seed(seed)
        for step in range(steps):
            opt.zero_grad(set_to_none=True)
            out = compiled(**make_batch(step))
            loss = out["loss"]
            loss.backward()
            run.losses.append(loss.detach().clone())
            run.grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
            opt.step()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    stats = compile_stats()
    assert stats.runs >= 2 * steps and stats.fallbacks == 0, f"the engine did not run every graph: {stats}"
    run.memory = torch_ort_backend.memory_stats()
    run.reports = [r.getMessage() for r in handler.records if r.getMessage().startswith("Memory Optimizer")]
    run.warnings = [r.getMessage() for r in handler.records
                    if r.levelno >= logging.WARNING and r.getMessage().startswith("Memory Optimizer")]
    run.replayed_dropouts = stats.aten_fallback_ops.get(REPLAY_OP, 0)
    if pass_prefix is not None:
        run.pass_lines = [line for g in live_graphs() if getattr(g, "stage", None) == "backward"
                          for line in g.session.applied_passes() if line.startswith(pass_prefix)]
    return run


def assert_identical(reference: Run, other: Run, what: str) -> None:
    """Every loss and every gradient of every step equal, bit for bit."""
    assert len(reference.losses) == len(other.losses)
    for step, (a, b) in enumerate(zip(reference.losses, other.losses)):
        assert torch.equal(a, b), f"{what}: loss of step {step} differs: {a.item()} vs {b.item()}"
    for step, (ga, gb) in enumerate(zip(reference.grads, other.grads)):
        assert ga.keys() == gb.keys(), f"{what}: step {step} has gradients for other parameters"
        for name in ga:
            assert torch.equal(ga[name], gb[name]), (
                f"{what}: gradient of {name} at step {step} differs by {(ga[name] - gb[name]).abs().max().item()}")


def graph_memory(run: Run, stage: str) -> dict:
    """memory_stats()'s figures for the one graph of `stage` the run compiled (graph names carry a
    process-wide number)."""
    graphs = [g for g in run.memory["graphs"].values() if g["stage"] == stage]
    assert len(graphs) == 1, run.memory
    return graphs[0]


def set_switch(monkeypatch: Any, name: str, value: str | None) -> None:
    """An engine switch (read when sessions are created) set to `value`, or unset for None."""
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)


def reset_warning(monkeypatch: Any) -> None:
    monkeypatch.setattr(report_module, "_warned_off", False)
