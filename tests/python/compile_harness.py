"""Does torch.compile(model, backend=...) train and infer like eager PyTorch?

    check_training_matches_eager(make_model, make_batch, backend="ort", steps=3)
    check_inference_matches_eager(make_model, make_batch, backend="ort")

`make_model()` builds the model (seeded, dropout 0: see torch_ort_backend/testing/models.py); `make_batch(step)` returns
the keyword arguments of one forward call. The eager model and the compiled one start from the same
weights (the second is a deepcopy of the first) and get the same batches. At every step the
forward outputs (loss, logits, every tensor of a nested output, matched by path) and EVERY
parameter's gradient must match within rtol/atol; a mismatch names the step and the output or the
parameter. The optimizer runs in eager PyTorch for both, so the parameters after each step are
compared as well: they can only drift apart through the gradients.

A check is only worth something if the backend really ran, so each one resets TorchDynamo, counts
the graphs it handed to the backend, and fails when there were none (a silent fallback to eager
would otherwise compare eager with itself).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch import nn

from torch_ort_backend.testing.models import extract_loss, flatten_outputs  # noqa: F401  (flatten_outputs: tests)

OptimizerFactory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]

OPTIMIZERS: dict[str, OptimizerFactory] = {
    # Plain SGD keeps the parameter drift between the two models proportional to the gradient
    # difference; AdamW normalises updates, so a gradient that is ~0 in both (noise of 1e-9)
    # can step by +-lr in each: use it with looser tolerances or a backend that is bitwise exact.
    "sgd": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01),
}


def _call(model: nn.Module, batch: Any) -> Any:
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(*batch)
    return model(batch)


def _compile(model: nn.Module, backend: str | Callable, options: dict | None, dynamic: bool | None,
             fullgraph: bool) -> nn.Module:
    kwargs: dict[str, Any] = {"backend": backend, "dynamic": dynamic, "fullgraph": fullgraph}
    if options:
        kwargs["options"] = options
    return torch.compile(model, **kwargs)


def _reset_dynamo() -> None:
    # Dynamo caches per code object (GPT-2's forward is shared by every GPT-2 instance) and gives
    # up recompiling after a few guard failures; each check must start from a clean slate.
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    from torch_ort_backend import compile_stats

    compile_stats().reset()


def _graphs_compiled() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _assert_backend_ran(backend: Any) -> None:
    graphs = _graphs_compiled()
    if graphs == 0:
        breaks = dict(torch._dynamo.utils.counters["graph_break"])
        raise AssertionError(f"torch.compile(backend={backend!r}) compiled no graph: the model ran in eager "
                             f"PyTorch, so nothing was checked (graph breaks: {breaks or 'none'})")
    if backend in ("ort", "onnxrt"):
        # The graph reached our backend; did the engine run it, rather than the fallback policy?
        from torch_ort_backend import compile_stats

        stats = compile_stats()
        if stats.runs == 0 or stats.fallbacks:
            raise AssertionError(f"the engine ran {stats.runs} graphs with {stats.fallbacks} fallbacks to eager: {stats}")


def _compare_outputs(eager_out: Any, compiled_out: Any, what: str, rtol: float, atol: float) -> None:
    expected, actual = flatten_outputs(eager_out), flatten_outputs(compiled_out)
    expected_paths, actual_paths = [p for p, _ in expected], [p for p, _ in actual]
    if expected_paths != actual_paths:
        raise AssertionError(f"{what}: the compiled model returned {actual_paths}, eager returned {expected_paths}")
    if not expected:
        raise AssertionError(f"{what}: the model returned no tensor to compare")
    for (path, want), (_, got) in zip(expected, actual):
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol,
                                   msg=lambda m, path=path: f"{what}: {path} differs from eager: {m}")


def _compare_gradients(eager: nn.Module, compiled: nn.Module, step: int, rtol: float, atol: float) -> int:
    """Compares every parameter's .grad by name; returns how many were compared."""
    compiled_params = dict(compiled.named_parameters())
    compared = 0
    for name, param in eager.named_parameters():
        mine = compiled_params[name]
        if param.grad is None or mine.grad is None:
            if (param.grad is None) != (mine.grad is None):
                has, lacks = ("eager", "compiled") if mine.grad is None else ("compiled", "eager")
                raise AssertionError(f"step {step}: parameter {name} has a gradient in {has} but not in {lacks}")
            continue
        torch.testing.assert_close(mine.grad, param.grad, rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"step {step}: gradient of parameter {name}: {m}")
        compared += 1
    return compared


def _compare_parameters(eager: nn.Module, compiled: nn.Module, step: int, rtol: float, atol: float) -> None:
    compiled_params = dict(compiled.named_parameters())
    for name, param in eager.named_parameters():
        torch.testing.assert_close(compiled_params[name].detach(), param.detach(), rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"after step {step}: parameter {name}: {m}")


def _twins(make_model: Callable[[], nn.Module]) -> tuple[nn.Module, nn.Module]:
    eager = make_model()
    # deepcopy keeps tied weights tied (GPT-2's lm_head is its token embedding).
    return eager, copy.deepcopy(eager)


def check_training_matches_eager(make_model: Callable[[], nn.Module], make_batch: Callable[[int], Any],
                                 backend: str | Callable = "ort", steps: int = 3, options: dict | None = None,
                                 rtol: float = 1e-4, atol: float = 1e-5, dynamic: bool | None = None,
                                 optimizer: str | OptimizerFactory = "sgd", fullgraph: bool = False) -> None:
    """Trains an eager model and its torch.compile'd twin side by side for `steps` steps (forward,
    backward, optimizer step) and asserts that outputs, every gradient and the updated parameters
    match. `optimizer` is a key of OPTIMIZERS or a factory taking the parameter list."""
    _reset_dynamo()
    make_optimizer = OPTIMIZERS[optimizer] if isinstance(optimizer, str) else optimizer
    eager, twin = _twins(make_model)
    eager.train()
    twin.train()
    compiled = _compile(twin, backend, options, dynamic, fullgraph)
    train_side_by_side(eager, compiled, twin, make_batch, steps, make_optimizer, rtol, atol,
                       on_first_step=lambda: _assert_backend_ran(backend))


def train_side_by_side(eager: nn.Module, other: Callable, other_module: nn.Module, make_batch: Callable[[int], Any],
                       steps: int, make_optimizer: OptimizerFactory, rtol: float, atol: float,
                       on_first_step: Callable[[], None] | None = None) -> None:
    """`steps` training steps of `eager` and of `other` (a compiled or wrapped copy whose parameters
    are other_module's), each with its own optimizer; asserts at every step that the outputs, every
    gradient and the updated parameters match."""
    eager_opt, other_opt = make_optimizer(list(eager.parameters())), make_optimizer(list(other_module.parameters()))
    for step in range(steps):
        batch = make_batch(step)
        eager_opt.zero_grad(set_to_none=True)
        other_opt.zero_grad(set_to_none=True)
        eager_out = _call(eager, batch)
        other_out = _call(other, batch)
        if step == 0 and on_first_step is not None:
            on_first_step()
        _compare_outputs(eager_out, other_out, f"step {step} forward", rtol, atol)
        extract_loss(eager_out).backward()
        extract_loss(other_out).backward()
        if _compare_gradients(eager, other_module, step, rtol, atol) == 0:
            raise AssertionError(f"step {step}: no parameter received a gradient")
        eager_opt.step()
        other_opt.step()
        _compare_parameters(eager, other_module, step, rtol, atol)


def check_inference_matches_eager(make_model: Callable[[], nn.Module], make_batch: Callable[[int], Any],
                                  backend: str | Callable = "ort", calls: int = 2, options: dict | None = None,
                                  rtol: float = 1e-4, atol: float = 1e-5, dynamic: bool | None = None,
                                  fullgraph: bool = False) -> None:
    """Runs an eager model and its torch.compile'd twin in eval mode under no_grad on `calls`
    batches and asserts that every output tensor matches."""
    _reset_dynamo()
    eager, twin = _twins(make_model)
    eager.eval()
    twin.eval()
    compiled = _compile(twin, backend, options, dynamic, fullgraph)
    with torch.no_grad():
        for call in range(calls):
            batch = make_batch(call)
            eager_out = _call(eager, batch)
            compiled_out = _call(compiled, batch)
            if call == 0:
                _assert_backend_ran(backend)
            _compare_outputs(eager_out, compiled_out, f"inference call {call}", rtol, atol)
