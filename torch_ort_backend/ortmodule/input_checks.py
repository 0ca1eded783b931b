"""What ORTModule accepts, checked before a call reaches TorchDynamo.

Modules: any nn.Module but torch.nn.DataParallel (it replicates the module on every call, so
nothing compiled once could be reused) and TorchScript modules (already compiled by another
compiler). Inputs: tensors, None, bool, int, float, str, torch.dtype and torch.device, nested in
dicts (HuggingFace ModelOutput included), lists, tuples (namedtuples included) and dataclasses.
Anything else is a Python object whose meaning the graph cannot hold: UnsupportedDataError, naming
the argument and the path inside it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch import nn

from ..errors import UnsupportedDataError, UnsupportedTorchModelError

_LEAVES = (bool, int, float, str, torch.dtype, torch.device, type(None))

ACCEPTED = ("tensors, None, bool, int, float, str, torch.dtype and torch.device, nested in dicts, lists, "
            "tuples, namedtuples and dataclasses")


def check_module(module: nn.Module) -> None:
    """Raises UnsupportedTorchModelError for the module kinds ORTModule cannot run."""
    if isinstance(module, nn.DataParallel):
        raise UnsupportedTorchModelError(
            "ORTModule does not support torch.nn.DataParallel (it replicates the module on every call); "
            "wrap the inner module instead (ORTModule(model.module)), and use "
            "torch.nn.parallel.DistributedDataParallel around the ORTModule for data parallelism")
    if isinstance(module, torch.jit.ScriptModule):
        raise UnsupportedTorchModelError(
            f"ORTModule needs the Python module, not the TorchScript module {type(module).__name__}; "
            "wrap the module before torch.jit.script")


@functools.lru_cache(maxsize=512)
def _signature(func: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        return None


def argument_names(forward: Callable, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """(name, value) of every argument of one call, positional ones named from forward's signature
    (``args[i]`` past a *args parameter or when the call does not bind)."""
    # The signature of the plain function is cached (building one costs more than the checks);
    # a bound method binds its instance first.
    func = getattr(forward, "__func__", None)
    signature = _signature(func if func is not None else forward)
    leading = (forward.__self__,) if func is not None else ()
    try:
        if signature is None:
            raise TypeError
        bound = signature.bind(*leading, *args, **kwargs)
    except TypeError:
        return [(f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())
    named = []
    for position, (name, value) in enumerate(bound.arguments.items()):
        if position < len(leading):
            continue
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            named.extend((f"{name}[{i}]", v) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named.extend(value.items())
        else:
            named.append((name, value))
    return named


def check_inputs(forward: Callable, args: tuple, kwargs: dict) -> bool:
    """Raises UnsupportedDataError for an input ORTModule cannot carry; returns whether any input
    tensor requires grad."""
    requires_grad = False
    stack = [(name, value) for name, value in reversed(argument_names(forward, args, kwargs))]
    while stack:
        path, value = stack.pop()
        if isinstance(value, torch.Tensor):
            requires_grad = requires_grad or value.requires_grad
        elif isinstance(value, _LEAVES):
            continue
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, (str, int)):
                    raise UnsupportedDataError(f"argument '{path}' has a key of type {type(key).__name__}; "
                                               f"ORTModule accepts str and int keys")
                stack.append((f"{path}[{key!r}]", item))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            stack.extend((f"{path}.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value))
        else:
            raise UnsupportedDataError(f"argument '{path}' is a {type(value).__qualname__}, which ORTModule "
                                       f"cannot pass to the graph; it accepts {ACCEPTED}")
    return requires_grad
