"""Multi-tensor helpers: one C++ call (vectorised, multi-threaded) per list of tensors.

``l2_norm``, ``scale_``, ``has_non_finite`` and ``clip_grad_norm_`` accept any number of float32,
float16 and bfloat16 CPU tensors, of mixed dtypes. Tensors on other devices, and float64 tensors,
go through torch's own ``_foreach`` kernels, so every helper works on every input torch accepts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from .._engine import C as _C

# ONNX TensorProto codes: the engine's dtype codes.
DTYPE_CODES = {torch.float32: 1, torch.float16: 10, torch.bfloat16: 16}


def _num_threads() -> int:
    return torch.get_num_threads()


def _as_list(tensors: torch.Tensor | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    out = list(tensors)
    for i, t in enumerate(out):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"expected tensors, got {type(t).__name__} at position {i}")
        if t.layout != torch.strided:
            raise RuntimeError(f"tensor {i} has layout {t.layout}: the multi-tensor helpers need dense tensors")
        if not t.is_floating_point():
            raise TypeError(f"tensor {i} has dtype {t.dtype}: the multi-tensor helpers need floating-point tensors")
    return out


def _native(t: torch.Tensor) -> bool:
    """Whether the engine handles this tensor (the rest goes to torch's foreach kernels)."""
    return t.device.type == "cpu" and t.dtype in DTYPE_CODES


def _by_dtype(indices: Iterable[int], tensors: Sequence[torch.Tensor]) -> dict[torch.dtype, list[int]]:
    groups: dict[torch.dtype, list[int]] = {}
    for i in indices:
        groups.setdefault(tensors[i].dtype, []).append(i)
    return groups


def l2_norm(
    tensors: torch.Tensor | Iterable[torch.Tensor], per_tensor: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The L2 norm of all elements of all ``tensors`` together, as a float32 0-d tensor.

    With ``per_tensor=True`` also returns a float32 1-d tensor of each tensor's own norm. Squares
    are summed in float64; an inf or NaN element makes the norm inf or NaN.
    """
    ts = _as_list(tensors)
    device = ts[0].device if ts else torch.device("cpu")
    sum_sq = [0.0] * len(ts)
    native = [i for i, t in enumerate(ts) if _native(t)]
    for dtype, idx in _by_dtype(native, ts).items():
        keep = [ts[i].contiguous() for i in idx]
        _, norms = _C.multi_tensor_l2_norm(
            DTYPE_CODES[dtype], [t.data_ptr() for t in keep], [t.numel() for t in keep], _num_threads()
        )
        for i, n in zip(idx, norms):
            sum_sq[i] = n * n
    others = [i for i, t in enumerate(ts) if not _native(t)]
    if others:
        norms = torch._foreach_norm([ts[i] for i in others], 2)
        for i, n in zip(others, norms):
            sum_sq[i] = float(n.double()) ** 2
    total = torch.tensor(math.sqrt(math.fsum(sum_sq)), dtype=torch.float32, device=device)
    if not per_tensor:
        return total
    each = torch.tensor([math.sqrt(s) for s in sum_sq], dtype=torch.float32, device=device)
    return total, each


def scale_(
    tensors: torch.Tensor | Iterable[torch.Tensor],
    scale: float,
    out: torch.Tensor | Iterable[torch.Tensor] | None = None,
) -> bool:
    """Multiplies every tensor by ``scale`` in float32, in place or into ``out``.

    ``out`` (optional) holds one tensor per input with the same number of elements; its dtypes may
    differ from the inputs' (float16 gradients unscaled into float32 master gradients, say).
    Returns whether any scaled value is inf or NaN: the overflow check of loss scaling, for free.
    """
    srcs = _as_list(tensors)
    dsts = srcs if out is None else _as_list(out)
    if len(dsts) != len(srcs):
        raise ValueError(f"scale_: {len(srcs)} tensors but {len(dsts)} outputs")
    for i, (s, d) in enumerate(zip(srcs, dsts)):
        if s.numel() != d.numel():
            raise ValueError(f"scale_: tensor {i} has {s.numel()} elements but its output has {d.numel()}")
        if s.device != d.device:
            raise ValueError(f"scale_: tensor {i} is on {s.device} but its output is on {d.device}")
    scale = float(scale)
    found = False
    native = [i for i in range(len(srcs)) if _native(srcs[i]) and _native(dsts[i]) and dsts[i].is_contiguous()]
    pairs: dict[tuple[torch.dtype, torch.dtype], list[int]] = {}
    for i in native:
        pairs.setdefault((srcs[i].dtype, dsts[i].dtype), []).append(i)
    for (sd, dd), idx in pairs.items():
        keep = [srcs[i].contiguous() for i in idx]
        found |= _C.multi_tensor_scale(
            DTYPE_CODES[sd],
            [t.data_ptr() for t in keep],
            DTYPE_CODES[dd],
            [dsts[i].data_ptr() for i in idx],
            [t.numel() for t in keep],
            scale,
            _num_threads(),
        )
    native_set = set(native)
    for i in range(len(srcs)):
        if i in native_set:
            continue
        result = srcs[i].to(torch.promote_types(srcs[i].dtype, torch.float32)) * scale
        found |= not bool(torch.isfinite(result).all())
        dsts[i].copy_(result.reshape(dsts[i].shape))
    return bool(found)


def has_non_finite(tensors: torch.Tensor | Iterable[torch.Tensor]) -> bool:
    """Whether any element of any tensor is inf or NaN (one pass, stops at the first find)."""
    ts = _as_list(tensors)
    native = [i for i, t in enumerate(ts) if _native(t)]
    for dtype, idx in _by_dtype(native, ts).items():
        keep = [ts[i].contiguous() for i in idx]
        if _C.multi_tensor_has_non_finite(
            DTYPE_CODES[dtype], [t.data_ptr() for t in keep], [t.numel() for t in keep], _num_threads()
        ):
            return True
    native_set = set(native)
    return any(not bool(torch.isfinite(t).all()) for i, t in enumerate(ts) if i not in native_set)


def clip_grad_norm_(
    parameters: torch.Tensor | Iterable[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` on the multi-tensor kernels.

    Scales the gradients of ``parameters`` so that their global L2 norm is at most ``max_norm``
    and returns the norm before clipping (float32 0-d tensor). Other norm types are handed to
    torch's implementation.
    """
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    if float(norm_type) != 2.0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total = l2_norm(grads)
    norm = float(total)
    if error_if_nonfinite and not math.isfinite(norm):
        raise RuntimeError(
            f"The total norm of order {float(norm_type)} for gradients from `parameters` is non-finite, so it "
            "cannot be clipped. To disable this error and scale the gradients by the non-finite norm anyway, "
            "set `error_if_nonfinite=False`"
        )
    coef = float(max_norm) / (norm + 1e-6)
    # As torch: the factor is clamped at 1, and a NaN norm makes the gradients NaN.
    if not coef >= 1.0:
        scale_(grads, coef)
    return total
