"""The dtype sweep: every converter whose ONNX op means something different per dtype, run on every
dtype torch allows for the op, against eager PyTorch, value for value.

The classes of difference (issue 18): bitwise vs logical, integer division and remainder signs,
shifts, casts that saturate or wrap, comparisons with NaN, min/max with NaN, rounding modes. The
inputs are each dtype's extremes and the values where those semantics part (negative operands,
zero, halves, NaN, infinities, shifts past the width). A (case, dtype) pair is collected only when
eager PyTorch accepts it, so the parameter list itself says which dtypes torch allows. Results must
be equal exactly (NaN equal to NaN), in torch's result dtype, with the engine running the graph;
and the op must run natively unless the case names the reason it is an ATen node for that dtype.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import pytest
import torch

from ortmodule_helpers import fresh_state
from torch_ort_backend import compile_stats

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
SIGNED = (torch.int8, torch.int16, torch.int32, torch.int64)
UNSIGNED = (torch.uint8, torch.uint16, torch.uint32, torch.uint64)
INTS = SIGNED + UNSIGNED
ALL = FLOATS + INTS + (torch.bool,)

_FLOAT_POOL = [-math.inf, -1e10, -300.75, -129.5, -128.0, -7.5, -2.5, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0,
               1.5, 2.5, 3.0, 7.25, 127.0, 255.5, 300.75, 1e10, math.inf, math.nan]
_SMALL_FLOATS = [-math.inf, -7.5, -2.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.5, 3.0, math.inf, math.nan]


def _int_pool(dtype: torch.dtype) -> list[int]:
    info = torch.iinfo(dtype)
    wanted = [info.min, info.min + 1, -129, -128, -7, -3, -2, -1, 0, 1, 2, 3, 7, 100, 127, 128, 255,
              info.max - 1, info.max]
    return sorted({v for v in wanted if info.min <= v <= info.max})


def values(dtype: torch.dtype, small: bool = False) -> list:
    if dtype.is_floating_point:
        return _SMALL_FLOATS if small else _FLOAT_POOL
    if dtype == torch.bool:
        return [True, False]
    pool = _int_pool(dtype)
    if small:
        pool = [v for v in pool if -8 <= v <= 8] + [pool[0], pool[-1]]
    return pool


def tensor(vals: list, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.tensor(vals, dtype=torch.float64).to(dtype)
    return torch.tensor(vals, dtype=dtype)


def unary(dtype: torch.dtype) -> tuple:
    return (tensor(values(dtype), dtype),)


def pairs(dtype: torch.dtype, divisor: bool = False) -> tuple:
    """Every pair of a small pool: all sign combinations, extremes against small values. With
    `divisor`, no integer division by zero (torch raises) and no MIN / -1 (the CPU traps)."""
    pool = values(dtype, small=True)
    combos = list(itertools.product(pool, pool))
    if divisor and not dtype.is_floating_point:
        low = torch.iinfo(dtype).min if dtype != torch.bool else 0
        combos = [(a, b) for a, b in combos if b != 0 and not (a == low and b == -1)]
    a, b = zip(*combos)
    return tensor(list(a), dtype), tensor(list(b), dtype)


def shift_pairs(dtype: torch.dtype) -> tuple:
    """Each value of the pool shifted by amounts inside, at and past the width, and negative ones."""
    pool = values(dtype, small=True)
    bits = torch.iinfo(dtype).bits
    amounts = sorted({0, 1, 3, bits - 1, bits, bits + 1, 2 * bits} | ({-1, -bits} if dtype.is_signed else set()))
    amounts = [s for s in amounts if torch.iinfo(dtype).min <= s <= torch.iinfo(dtype).max]
    a, b = zip(*itertools.product(pool, amounts))
    return tensor(list(a), dtype), tensor(list(b), dtype)


@dataclass
class Case:
    name: str
    fn: Callable
    make: Callable[[torch.dtype], tuple] = unary
    dtypes: tuple = ALL
    # dtype -> why this op is (on purpose) an ATen node for it, or None where it must run natively
    aten_reason: Callable[[torch.dtype], str | None] = field(default=lambda dt: None)


def _integer(dt: torch.dtype) -> bool:
    return not dt.is_floating_point and dt != torch.bool


def _int_division(dt: torch.dtype) -> str | None:
    # bool operands divide as integers too (their quotient is int64)
    return None if dt.is_floating_point else "integer floor/trunc division: torch's kernel (raises on division by zero)"


def _divisions(dt: torch.dtype) -> tuple:
    return pairs(dt, divisor=True)


def _cast_inputs(target: torch.dtype) -> Callable[[torch.dtype], tuple]:
    """A float converted to an integer type it does not fit (NaN, infinities, out of range) is
    undefined in C++, and torch's result is whatever the CPU's conversion gives: those values are
    left out (docs/torch_compile.md says what the engine does with them)."""

    def make(src: torch.dtype) -> tuple:
        (x,) = unary(src)
        if src.is_floating_point and _integer(target):
            info, wide = torch.iinfo(target), x.double()
            x = x[wide.isfinite() & (wide.trunc() >= info.min) & (wide.trunc() <= info.max)]
        return (x,)

    return make


CASES = [
    # ---- bitwise vs logical ----
    Case("bitwise_and", lambda a, b: a & b, pairs),
    Case("bitwise_or", lambda a, b: a | b, pairs),
    Case("bitwise_xor", lambda a, b: a ^ b, pairs),
    Case("bitwise_and_scalar", lambda a: (a & 5, a & -3, a & 300), unary, INTS),
    Case("bitwise_or_scalar", lambda a: (a | 6, a | -128), unary, INTS),
    Case("bitwise_xor_scalar", lambda a: (a ^ 1, a ^ -1), unary, INTS),
    Case("bitwise_bool_scalar", lambda a: (a & True, a | False, a ^ True), unary, (torch.bool,)),
    Case("bitwise_not", lambda a: ~a),
    Case("left_shift", lambda a, s: a << s, shift_pairs, INTS),
    Case("right_shift", lambda a, s: a >> s, shift_pairs, INTS),
    Case("shift_by_scalars", lambda a: (a << 3, a >> 2, a << 9, a >> 9, a << 257, a >> 63), unary, INTS),
    Case("logical_ops", lambda a, b: (torch.logical_and(a, b), torch.logical_or(a, b), torch.logical_xor(a, b),
                                      torch.logical_not(a)), pairs),
    # ---- division, remainder, rounding modes ----
    Case("true_divide", lambda a, b: a / b, _divisions),
    Case("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), _divisions,
         aten_reason=_int_division),
    Case("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), _divisions,
         aten_reason=_int_division),
    Case("floor_divide", lambda a, b: a // b, _divisions, aten_reason=_int_division),
    Case("remainder", lambda a, b: a % b, _divisions, aten_reason=_int_division),
    Case("fmod", lambda a, b: torch.fmod(a, b), _divisions, aten_reason=_int_division),
    Case("div_scalar_modes", lambda a: (a / 3, torch.div(a, -2, rounding_mode="floor"),
                                        torch.div(a, 0.4, rounding_mode="trunc")), unary, ALL,
         aten_reason=_int_division),
    Case("round_floor_ceil_trunc", lambda a: (torch.round(a), torch.floor(a), torch.ceil(a), torch.trunc(a))),
    Case("round_decimals", lambda a: torch.round(a, decimals=1), unary, FLOATS),
    # ---- arithmetic that wraps or promotes ----
    Case("add_sub_mul", lambda a, b: (a + b, a - b, a * b), pairs),
    Case("add_mul_bool", lambda a, b: (a + b, a * b), pairs, (torch.bool,)),
    Case("add_alpha_rsub", lambda a, b: (torch.add(a, b, alpha=3), 5 - a, torch.rsub(a, b, alpha=2)), pairs),
    Case("mul_by_float_scalar", lambda a: (a * 1.5, a + 0.5, a - 2.25), unary, ALL),
    Case("neg_abs_sign", lambda a: (-a, torch.abs(a), torch.sign(a), torch.sgn(a))),
    Case("relu", lambda a: torch.relu(a)),
    Case("pow_small_integer_exponents", lambda a: (a ** 2, a ** 3, a ** 4, a ** 0, a ** 1), unary),
    # Integer powers wrap; torch refuses negative integer exponents, hence the clamp. (Float powers
    # are transcendental, an ulp apart between libm and torch's vectorised pow: test_exporter_ops.)
    Case("pow_tensor_and_scalar_base", lambda a, b: (a ** b.clamp(0, 5), 2 ** b.clamp(0, 5), a ** 5), pairs, INTS),
    Case("sum_prod_cumsum", lambda a: (a.sum(), a.sum(0, keepdim=True), a[:6].prod(0), a.cumsum(0))),
    Case("mean", lambda a: (a.mean(), a.mean(0)), unary, FLOATS),
    # ---- casts that saturate or wrap ----
    *[Case(f"cast_to_{str(t).split('.')[-1]}", (lambda t: lambda a: a.to(t))(t), _cast_inputs(t)) for t in ALL],
    # ---- comparisons with NaN, mixed-type comparisons ----
    Case("compare", lambda a, b: (a == b, a != b, a < b, a <= b, a > b, a >= b), pairs),
    Case("compare_float_scalar", lambda a: (a == 1.5, a != 0.5, a < 2.5, a <= -0.5, a > 0.5, a >= 1.0), unary),
    Case("isnan_isinf", lambda a: (torch.isnan(a), torch.isinf(a))),
    # ---- min / max with NaN ----
    Case("maximum_minimum", lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)), pairs),
    Case("clamp", lambda a: (a.clamp(-2, 3), a.clamp_min(0), a.clamp_max(1), a.clamp(0.5, 2.5)), unary),
    Case("amax_amin", lambda a: (a.amax(), a.amin(), a.view(2, -1).amax(1), a.view(2, -1).amin(1))),
    Case("max_min_dim", lambda a: (*a.view(2, -1).max(1), *a.view(2, -1).min(1))),
    Case("argmax_argmin", lambda a: (a.argmax(), a.argmin(), a.view(2, -1).argmax(1), a.view(2, -1).argmin(1))),
    Case("where_masked_fill", lambda a, b: (torch.where(a > b, a, b), a.masked_fill(b < a, 1),
                                            torch.where(a != b, a, 2.5)), pairs),
]


def _allowed(case: Case, dtype: torch.dtype) -> bool:
    """Eager PyTorch decides which dtypes an op has."""
    try:
        case.fn(*case.make(dtype))
    except (RuntimeError, TypeError, ZeroDivisionError, NotImplementedError):
        return False
    return True


PARAMS = [pytest.param(case, dt, id=f"{case.name}-{str(dt).split('.')[-1]}")
          for case in CASES for dt in case.dtypes if _allowed(case, dt)]


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    yield from fresh_state(monkeypatch)


def _flat(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _mismatches(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    if expected.dtype.is_floating_point:
        a, e = actual.double(), expected.double()
        return ~((a == e) | (a.isnan() & e.isnan()))
    return actual != expected


def _describe(inputs: tuple, index: int, out_shape: torch.Size, inputs_shape: torch.Size) -> str:
    if out_shape == inputs_shape:
        return ", ".join(str(x.reshape(-1)[index].item()) for x in inputs)
    return "(reduction)"


@pytest.mark.parametrize("case,dtype", PARAMS)
def test_matches_eager(case: Case, dtype: torch.dtype) -> None:
    inputs = case.make(dtype)
    expected = _flat(case.fn(*inputs))
    actual = _flat(torch.compile(case.fn, backend="ort", dynamic=False)(*[x.clone() for x in inputs]))
    stats = compile_stats()
    assert stats.runs >= 1 and stats.fallbacks == 0, f"the engine did not run the graph: {stats}"
    assert len(actual) == len(expected)
    problems = []
    for k, (a, e) in enumerate(zip(actual, expected)):
        if a.dtype != e.dtype or a.shape != e.shape:
            problems.append(f"output {k}: {a.dtype}{list(a.shape)}, eager {e.dtype}{list(e.shape)}")
            continue
        bad = _mismatches(a, e).reshape(-1).nonzero().reshape(-1)
        for i in bad[:6].tolist():
            problems.append(f"output {k} at [{i}] (inputs {_describe(inputs, i, a.shape, inputs[0].shape)}): "
                            f"{a.reshape(-1)[i].item()}, eager {e.reshape(-1)[i].item()}")
        if len(bad) > 6:
            problems.append(f"output {k}: {len(bad)} values differ in all")
    assert not problems, f"{case.name} on {dtype}:\n  " + "\n  ".join(problems)
    reason = case.aten_reason(dtype)
    aten_ops = dict(stats.aten_fallback_ops)
    if reason is None:
        assert not aten_ops, f"{case.name} on {dtype} reached the ATen fallback: {aten_ops}"


def _logical_ops_on_non_bool(models) -> list[str]:
    """ONNX's And/Or/Xor/Not are defined on bool only: the bug of issue 18 was an integer reaching one."""
    import onnx

    found = []
    for model in models:
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {v.name: v.type.tensor_type.elem_type for v in
                 list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
        for node in inferred.graph.node:
            if node.domain in ("", "ai.onnx") and node.op_type in ("And", "Or", "Xor", "Not"):
                bad = [n for n in node.input if types.get(n, onnx.TensorProto.BOOL) != onnx.TensorProto.BOOL]
                if bad:
                    found.append(f"{node.op_type} {node.name} on {bad}")
    return found


# The lowerings that depend on the opset: BitwiseAnd/Or/Xor/Not are opset 18 (below, integers stay
# ATen nodes), BitShift opset 11, IsInf takes 16-bit floats from opset 20, Round bfloat16 from 22.
_OPSET_CASES = ("bitwise_and", "bitwise_or_scalar", "bitwise_xor", "bitwise_not", "left_shift", "right_shift",
                "shift_by_scalars", "logical_ops", "isnan_isinf", "round_floor_ceil_trunc")
_OPSET_PARAMS = [pytest.param(p.values[0], p.values[1], opset, id=f"{p.id}-opset{opset}")
                 for p in PARAMS if p.values[0].name in _OPSET_CASES for opset in (14, 17, 21)]


@pytest.mark.parametrize("case,dtype,opset", _OPSET_PARAMS)
def test_every_supported_opset_matches_eager(case: Case, dtype: torch.dtype, opset: int) -> None:
    from torch_ort_backend import compiled_graph

    inputs = case.make(dtype)
    expected = _flat(case.fn(*inputs))
    before = max((g.serial for g in compiled_graph.live_graphs()), default=0)
    compiled = torch.compile(case.fn, backend="ort", dynamic=False, options={"opset": opset})
    actual = _flat(compiled(*[x.clone() for x in inputs]))
    stats = compile_stats()
    assert stats.runs >= 1 and stats.fallbacks == 0, f"the engine did not run the graph: {stats}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype, f"output {k}"
        assert not _mismatches(a, e).any(), f"{case.name} on {dtype} at opset {opset}, output {k}: {a} != {e}"
    models = [g.exported.model for g in compiled_graph.live_graphs() if g.serial > before and g.exported is not None]
    assert models and all(m.opset_import[0].version == opset for m in models)
    assert not _logical_ops_on_non_bool(models)
    # Natively everywhere: bool logic, and every shift BitShift (opset 11) can express alone.
    native = dtype == torch.bool or opset >= 18 or (
        case.name in ("left_shift", "right_shift", "shift_by_scalars") and not dtype.is_signed) or (
        case.name == "left_shift")
    if native and case.name not in ("isnan_isinf", "round_floor_ceil_trunc"):
        assert not stats.aten_fallback_ops, dict(stats.aten_fallback_ops)
