"""The converter registry: one function per ATen overload, registered by decorator.

A converter has the signature ``fn(ctx, node, a) -> Val | tuple[Val, ...] | None`` where ``a`` holds the
node's arguments bound to the op's schema by name (``a.self``, ``a.dim`` ...; graph values already turned
into :class:`~torch_ort_backend.exporter.context.Val`). Returning ``None`` declines: the node is then
exported as an ATen node and runs through torch's dispatcher.
"""

from __future__ import annotations

from typing import Callable

import torch

Converter = Callable[..., object]

_CONVERTERS: dict[object, Converter] = {}


def _overloads(target) -> list:
    if isinstance(target, torch._ops.OpOverloadPacket):
        return [getattr(target, name) for name in target.overloads()]
    return [target]


def converter(*targets) -> Callable[[Converter], Converter]:
    """Registers ``fn`` for each target (an OpOverload, an OpOverloadPacket meaning all its overloads,
    or a Python callable such as ``operator.mul`` for SymInt arithmetic)."""

    def register(fn: Converter) -> Converter:
        for target in targets:
            for t in _overloads(target):
                if t in _CONVERTERS:
                    raise ValueError(f"two converters registered for {t}")
                _CONVERTERS[t] = fn
        return fn

    return register


def lookup(target) -> Converter | None:
    _load_families()
    return _CONVERTERS.get(target)


def registered_targets() -> list[str]:
    _load_families()
    return sorted(str(t) for t in _CONVERTERS)


_loaded = False


def _load_families() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    # Importing a family module registers its converters.
    from . import (  # noqa: F401
        ops_elementwise,
        ops_elementwise_bitwise,
        ops_elementwise_division,
        ops_generator,
        ops_nn,
        ops_python,
        ops_reduction,
        ops_symbolic,
        ops_tensor,
        ops_tensor_resample,
        ops_training,
        ops_training_attention,
    )
