"""Which ops the engine has kernels for, so converters emit native nodes only where they will run."""

from __future__ import annotations

import functools

import torch

from .context import onnx_dtype


@functools.cache
def _kernels() -> dict[tuple[str, str], set[int]]:
    from .._engine import C

    table: dict[tuple[str, str], set[int]] = {}
    for k in C.registered_kernels():
        types = table.setdefault((k["domain"], k["op_type"]), set())
        cons = k["constraints"]
        # The data type constraint is "T" by convention (index inputs have their own, e.g. "Tind").
        data = [c for c in cons if c[0] == "T"] or cons[:1]
        for c in data:
            types.update(c[2])
    return table


def engine_has(domain: str, op_type: str, dtype: torch.dtype | None = None) -> bool:
    types = _kernels().get((domain, op_type))
    if types is None:
        return False
    return dtype is None or not types or onnx_dtype(dtype) in types
