"""What a Function returns, found without compiling it: the number, dtypes and shapes of its
outputs, which are non-differentiable, and which inputs it modifies in place (mark_dirty).

The forward is first run on the fake tensors the compiler traces with. A forward that cannot run
on fake tensors (it calls numpy, reads a value with .item(), branches on data) is run once on real
tensors of the same shapes and dtypes instead (random values in [0.1, 1), zeros for integers),
on a separate thread so that none of the tracer's modes apply. That relies on one assumption,
the one onnxruntime-training's PythonOp made too: the output shapes depend only on the input
shapes, dtypes and constant arguments. Results of real runs are cached, so a Function runs once
per distinct signature, not once per tracing pass.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .registry import build_arguments
from .runtime import with_autograd_dispatch


class ProbeError(RuntimeError):
    """The Function's outputs are not something a PythonOp carries (a non-tensor, a nested list)."""


@dataclass(frozen=True)
class OutputMeta:
    shape: tuple  # ints, or SymInts when traced with dynamic shapes
    dtype: torch.dtype
    device: torch.device


@dataclass(frozen=True)
class ProbeResult:
    outputs: tuple[OutputMeta, ...]
    single: bool  # forward returned one tensor, not a tuple
    non_differentiable: tuple[int, ...]  # output indices
    inplace: tuple[tuple[int, int], ...]  # (output index, tensor input index) for mark_dirty inputs


_REAL_CACHE: dict[tuple, ProbeResult] = {}
_REAL_LOCK = threading.Lock()


def _run(fn_cls: type, input_convention: str, constants: list[Any], tensors: Sequence[torch.Tensor],
         requires_grad: Sequence[bool]) -> ProbeResult:
    training = any(requires_grad)
    # Fake implementations run below the autograd key; the probe needs autograd (mark_dirty needs
    # a non-leaf, non-differentiable outputs show as outputs that do not require grad).
    with with_autograd_dispatch(), torch.set_grad_enabled(training):
        wrapped = []
        for t, r in zip(tensors, requires_grad):
            w = t.detach()
            if r and w.is_floating_point():
                w.requires_grad_(True)
            wrapped.append(w.clone())  # a non-leaf: mark_dirty inputs may be modified in place
        outputs = fn_cls.apply(*build_arguments(input_convention, wrapped, constants))
    single = not isinstance(outputs, tuple)
    outputs = (outputs,) if single else outputs
    metas, non_diff, inplace = [], [], []
    for j, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor):
            raise ProbeError(f"output {j} is a {type(o).__name__}; a PythonOp returns tensors only")
        metas.append(OutputMeta(tuple(o.shape), o.dtype, o.device))
        if training and not o.requires_grad:
            non_diff.append(j)
        for i, w in enumerate(wrapped):
            if o is w:
                inplace.append((j, i))
    return ProbeResult(tuple(metas), single, tuple(non_diff), tuple(inplace))


def _hint(d: Any) -> int:
    """The example value of a size (no guard is added: the real run only needs some valid size)."""
    if isinstance(d, torch.SymInt):
        from torch.fx.experimental import symbolic_shapes

        hint = getattr(symbolic_shapes, "optimization_hint", None) or symbolic_shapes.hint_int  # torch < 2.12
        return int(hint(d))
    return int(d)


def _synthetic(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if dtype.is_floating_point or dtype.is_complex:
        return torch.rand(shape, dtype=dtype, device=device) * 0.9 + 0.1
    return torch.zeros(shape, dtype=dtype, device=device)


def _resymbolize(meta: OutputMeta, tensors: Sequence[torch.Tensor]) -> OutputMeta:
    """Concrete output sizes found by a real run, mapped back to the inputs' symbolic sizes where
    they coincide (the output has the batch size of the input it was computed from)."""
    symbols: dict[int, Any] = {}
    for t in tensors:
        for d in t.shape:
            if isinstance(d, torch.SymInt):
                symbols.setdefault(_hint(d), d)
    if not symbols:
        return meta
    return OutputMeta(tuple(symbols.get(d, d) for d in meta.shape), meta.dtype, meta.device)


def _real_probe(key: tuple, fn_cls: type, input_convention: str, constants: list[Any],
                specs: list[tuple[tuple[int, ...], torch.dtype, torch.device]],
                requires_grad: Sequence[bool]) -> ProbeResult:
    with _REAL_LOCK:
        cached = _REAL_CACHE.get(key)
    if cached is not None:
        return cached
    box: dict[str, Any] = {}

    def job() -> None:
        try:
            tensors = [_synthetic(*s) for s in specs]
            box["result"] = _run(fn_cls, input_convention, constants, tensors, requires_grad)
        except BaseException as e:  # re-raised on the caller's thread
            box["error"] = e

    thread = threading.Thread(target=job, name="tob-python-op-probe")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    with _REAL_LOCK:
        _REAL_CACHE[key] = box["result"]
    return box["result"]


def probe(fn_cls: type, func_name: str, input_convention: str, constant_args: str, constants: list[Any],
          tensors: Sequence[torch.Tensor], requires_grad: Sequence[bool]) -> ProbeResult:
    """Output metadata of ``fn_cls.apply`` on these (fake or real) tensors; ProbeError when the
    outputs cannot be carried, the forward's own exception when it fails on real tensors too."""
    try:
        return _run(fn_cls, input_convention, constants, tensors, requires_grad)
    except ProbeError:
        raise
    except Exception:
        pass
    specs = [(tuple(_hint(d) for d in t.shape), t.dtype, t.device) for t in tensors]
    key = (func_name, input_convention, constant_args, tuple(bool(r) for r in requires_grad), tuple(specs))
    result = _real_probe(key, fn_cls, input_convention, constants, specs, requires_grad)
    return ProbeResult(tuple(_resymbolize(m, tensors) for m in result.outputs), result.single,
                       result.non_differentiable, result.inplace)
