"""The multi-tensor helpers (torch_ort_backend.optim) against their torch equivalents."""

import math

import pytest
import torch

from torch_ort_backend.optim import clip_grad_norm_, has_non_finite, l2_norm, scale_

# Awkward sizes: vector tails, one element, and one larger than a C++ work segment (32768).
SHAPES = [(37,), (1,), (64, 33), (70001,), (3, 5, 7)]


def nonzero(shape, dtype=torch.float32, seed=0, scale=1.0):
    """Magnitudes in [0.1, 2) * scale with random signs: never zero."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.rand(shape, generator=g, dtype=torch.float64) * 1.9 + 0.1
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()
    return (mag * sign * scale).to(dtype)


def tensors(dtype, seed=0, scale=1.0):
    return [nonzero(s, dtype, seed + i, scale) for i, s in enumerate(SHAPES)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_l2_norm_matches_torch(dtype):
    ts = tensors(dtype)
    expect = torch.linalg.vector_norm(torch.cat([t.double().flatten() for t in ts]))
    total, each = l2_norm(ts, per_tensor=True)
    assert total.dtype == torch.float32 and total.dim() == 0
    torch.testing.assert_close(total.double(), expect, rtol=1e-6, atol=0)
    torch.testing.assert_close(each.double(), torch.stack([torch.linalg.vector_norm(t.double()) for t in ts]),
                               rtol=1e-6, atol=0)
    torch.testing.assert_close(l2_norm(ts), total)


def test_l2_norm_of_mixed_dtypes_non_contiguous_and_float64():
    ts = [nonzero((40, 30), torch.float32, 1).t(), nonzero((100,), torch.bfloat16, 2), nonzero((9,), torch.float64, 3)]
    expect = math.sqrt(sum(float(t.double().pow(2).sum()) for t in ts))
    assert float(l2_norm(ts)) == pytest.approx(expect, rel=1e-6)
    assert float(l2_norm([])) == 0.0


def test_l2_norm_propagates_non_finite():
    ts = tensors(torch.float32)
    ts[3][-1] = float("inf")
    assert math.isinf(float(l2_norm(ts)))
    ts[0][0] = float("nan")
    assert math.isnan(float(l2_norm(ts)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_scale_in_place_matches_torch(dtype):
    ts = tensors(dtype, seed=10)
    expect = [(t.float() * 0.37).to(dtype) for t in ts]
    assert scale_(ts, 0.37) is False
    for t, e in zip(ts, expect):
        torch.testing.assert_close(t, e, rtol=0, atol=0)


def test_scale_into_other_dtype_unscales_and_checks_overflow():
    half = tensors(torch.float16, seed=20, scale=1000.0)
    out = [torch.empty(t.shape, dtype=torch.float32) for t in half]
    assert scale_(half, 1.0 / 1024, out=out) is False
    for h, o in zip(half, out):
        torch.testing.assert_close(o, h.float() / 1024, rtol=0, atol=0)
    half[3][12345] = float("inf")
    assert scale_(half, 1.0 / 1024, out=out) is True
    # Overflow caused by the scale itself is found too.
    big = tensors(torch.float32, seed=21, scale=1e38)
    assert scale_(big, 100.0) is True


def test_scale_handles_non_contiguous_and_validates():
    base = nonzero((30, 40), seed=30)
    view = base.t()
    expect = base.t() * 2.0
    assert scale_([view], 2.0) is False
    torch.testing.assert_close(view, expect, rtol=0, atol=0)
    with pytest.raises(ValueError, match="outputs"):
        scale_(tensors(torch.float32), 2.0, out=[torch.empty(37)])
    with pytest.raises(ValueError, match="elements"):
        scale_([torch.ones(4)], 2.0, out=[torch.empty(5)])
    with pytest.raises(TypeError, match="int64"):
        scale_([torch.ones(4, dtype=torch.int64)], 2.0)
    with pytest.raises(RuntimeError, match="dense"):
        scale_([torch.ones(4).to_sparse()], 2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_has_non_finite(dtype, bad):
    ts = tensors(dtype, seed=40)
    ts[2][5, 5] = torch.finfo(dtype).max
    assert has_non_finite(ts) is False
    ts[3][-1] = bad
    assert has_non_finite(ts) is True
    assert has_non_finite([t.double() for t in ts]) is True  # the torch fallback agrees


def _params_with_grads(seed, dtype=torch.float32, grad_scale=1.0):
    params = [torch.nn.Parameter(nonzero(s, dtype, seed + i)) for i, s in enumerate(SHAPES)]
    for i, p in enumerate(params):
        p.grad = nonzero(p.shape, dtype, seed + 100 + i, grad_scale)
    return params


@pytest.mark.parametrize("max_norm", [0.5, 50.0, 1e6])
def test_clip_grad_norm_matches_torch(max_norm):
    ours = _params_with_grads(50, grad_scale=0.1)
    ref = _params_with_grads(50, grad_scale=0.1)
    norm = clip_grad_norm_(ours, max_norm)
    ref_norm = torch.nn.utils.clip_grad_norm_(ref, max_norm)
    torch.testing.assert_close(norm, ref_norm, rtol=1e-6, atol=0)
    for p, q in zip(ours, ref):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_other_norm_types_and_non_finite():
    ours, ref = _params_with_grads(60), _params_with_grads(60)
    torch.testing.assert_close(clip_grad_norm_(ours, 1.0, norm_type=float("inf")),
                               torch.nn.utils.clip_grad_norm_(ref, 1.0, norm_type=float("inf")))
    bad = _params_with_grads(61)
    bad[0].grad[3] = float("nan")
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(bad, 1.0, error_if_nonfinite=True)
    norm = clip_grad_norm_(bad, 1.0)
    assert math.isnan(float(norm))
    assert torch.isnan(bad[1].grad).all(), "as torch: a NaN norm makes every gradient NaN"
    assert float(clip_grad_norm_([torch.nn.Parameter(torch.ones(3))], 1.0)) == 0.0
