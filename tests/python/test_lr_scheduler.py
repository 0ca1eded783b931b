"""optim.lr_scheduler against onnxruntime-training 1.9's documented formulas, in float64 numpy.

With W = warmup * total_steps and s the optimization step, every scheduler warms up as
lr * s / max(1, W) while s < W; after warmup:
  constant: lr
  cosine:   lr * max(0, 0.5 * (1 + cos(pi * cycles * 2 * (s - W) / max(1, T - W))))
  linear:   lr * max(0, T - s) / max(1, T - W)
  poly:     (lr - lr_end) * (1 - (s - W) / (T - W)) ** power + lr_end, and lr_end for s > T
"""

import math

import numpy as np
import pytest

from torch_ort_backend.optim import AdamConfig, SGDConfig, lr_scheduler
from torch_ort_backend.optim.lr_scheduler import (
    ConstantWarmupLRScheduler,
    CosineWarmupLRScheduler,
    LinearWarmupLRScheduler,
    PolyWarmupLRScheduler,
)
from torch_ort_backend.trainer import TrainStepInfo


def reference_rates(kind, lr, steps, total, warmup, cycles=0.5, power=1.0, lr_end=1e-7):
    s = np.asarray(steps, dtype=np.float64)
    w = warmup * total
    in_warmup = s < w
    ramp = s / max(1.0, w)
    if kind == "constant":
        after = np.full_like(s, lr)
    elif kind == "cosine":
        progress = (s - w) / max(1.0, total - w)
        after = lr * np.maximum(0.0, 0.5 * (1.0 + np.cos(np.pi * cycles * 2.0 * progress)))
    elif kind == "linear":
        after = lr * np.maximum(0.0, total - s) / max(1.0, total - w)
    elif kind == "poly":
        remaining = np.clip(1.0 - (s - w) / (total - w), 0.0, None)
        after = np.where(s > total, lr_end, (lr - lr_end) * remaining**power + lr_end)
    return np.where(in_warmup, lr * ramp, after)


def run(scheduler, config, steps):
    info = TrainStepInfo(config)
    rates = []
    for step in steps:
        info.optimization_step = int(step)
        rates.append(scheduler._step(info)[0])
    return np.array(rates)


CASES = [
    ("constant", lambda T, w, **kw: ConstantWarmupLRScheduler(T, warmup=w)),
    ("cosine", lambda T, w, cycles, **kw: CosineWarmupLRScheduler(T, cycles=cycles, warmup=w)),
    ("linear", lambda T, w, **kw: LinearWarmupLRScheduler(T, warmup=w)),
    ("poly", lambda T, w, power, lr_end, **kw: PolyWarmupLRScheduler(T, lr_end=lr_end, power=power, warmup=w)),
]


@pytest.mark.parametrize("kind, make", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("total, warmup", [(200, 0.1), (37, 0.3), (10, 0.05), (50, 0.0)])
def test_rates_match_the_formula(rng, kind, make, total, warmup):
    lr = float(rng.uniform(1e-4, 1e-1))
    cycles = float(rng.uniform(0.3, 2.0))
    power = float(rng.uniform(0.5, 3.0))
    lr_end = lr * float(rng.uniform(0.01, 0.2))
    steps = np.arange(0, total + 6)
    scheduler = make(total, warmup, cycles=cycles, power=power, lr_end=lr_end)
    got = run(scheduler, AdamConfig(lr=lr), steps)
    expected = reference_rates(kind, lr, steps, total, warmup, cycles=cycles, power=power, lr_end=lr_end)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kind, make", CASES, ids=[c[0] for c in CASES])
def test_warmup_boundary(kind, make):
    # total 100, warmup 0.1: steps 0..9 ramp linearly, step 10 is the first after warmup and
    # reaches the full rate (the decays all start from lr at s = W).
    lr = 0.02
    scheduler = make(100, 0.1, cycles=0.5, power=2.0, lr_end=1e-6)
    rates = run(scheduler, SGDConfig(lr=lr), [0, 1, 9, 10])
    assert rates[0] == 0.0
    assert rates[1] == pytest.approx(lr * 0.1, rel=1e-12)
    assert rates[2] == pytest.approx(lr * 0.9, rel=1e-12)
    assert rates[3] == pytest.approx(lr, rel=1e-12)


def test_end_of_schedule():
    lr, total = 0.05, 40
    config = SGDConfig(lr=lr)
    at_and_after = [total, total + 1, total + 25]
    assert list(run(ConstantWarmupLRScheduler(total, warmup=0.1), config, at_and_after)) == [lr] * 3
    assert list(run(LinearWarmupLRScheduler(total, warmup=0.1), config, at_and_after)) == [0.0] * 3
    # Half a cosine wave ends at exactly 0 (cos(pi) = -1).
    cosine = run(CosineWarmupLRScheduler(total, cycles=0.5, warmup=0.1), config, [total])
    assert cosine[0] == pytest.approx(0.0, abs=1e-18)
    poly = run(PolyWarmupLRScheduler(total, lr_end=1e-4, power=2.0, warmup=0.1), config, at_and_after)
    np.testing.assert_allclose(poly, [1e-4] * 3, rtol=1e-12)


def test_fractional_warmup_steps():
    # warmup * total_steps = 0.5: only step 0 is in warmup, and it is divided by max(1, 0.5) = 1.
    rates = run(LinearWarmupLRScheduler(10, warmup=0.05), SGDConfig(lr=1.0), [0, 1])
    assert rates[0] == 0.0
    assert rates[1] == pytest.approx(9 / 9.5, rel=1e-12)


def test_get_last_lr_and_the_returned_list():
    scheduler = LinearWarmupLRScheduler(total_steps=10, warmup=0.2)
    assert scheduler.get_last_lr() == []
    info = TrainStepInfo(SGDConfig(lr=0.5), optimization_step=1)
    rates = scheduler._step(info)
    assert rates == [0.25]
    assert scheduler.get_last_lr() == [0.25]
    # get_lr computes without recording.
    info.optimization_step = 10
    assert scheduler.get_lr(info) == [0.0]
    assert scheduler.get_last_lr() == [0.25]


def test_custom_scheduler_subclasses_the_base():
    class Halving(lr_scheduler._LRScheduler):
        def get_lr(self, train_step_info):
            return [train_step_info.optimizer_config.lr * 0.5**train_step_info.optimization_step]

    scheduler = Halving()
    assert scheduler._step(TrainStepInfo(SGDConfig(lr=1.0), optimization_step=3)) == [0.125]
    with pytest.raises(NotImplementedError):
        lr_scheduler._LRScheduler().get_lr(TrainStepInfo(SGDConfig()))


@pytest.mark.parametrize(
    "make, culprit",
    [
        (lambda: LinearWarmupLRScheduler(0), "total_steps"),
        (lambda: LinearWarmupLRScheduler(-5), "total_steps"),
        (lambda: LinearWarmupLRScheduler(10.0), "total_steps"),
        (lambda: LinearWarmupLRScheduler(True), "total_steps"),
        (lambda: ConstantWarmupLRScheduler(10, warmup=-0.1), "warmup"),
        (lambda: ConstantWarmupLRScheduler(10, warmup=1.0), "warmup"),
        (lambda: ConstantWarmupLRScheduler(10, warmup=math.nan), "warmup"),
        (lambda: ConstantWarmupLRScheduler(10, warmup="0.1"), "warmup"),
        (lambda: CosineWarmupLRScheduler(10, cycles=0.0), "cycles"),
        (lambda: CosineWarmupLRScheduler(10, cycles=-1.0), "cycles"),
        (lambda: PolyWarmupLRScheduler(10, power=-1.0), "power"),
        (lambda: PolyWarmupLRScheduler(10, lr_end=-1e-3), "lr_end"),
        (lambda: PolyWarmupLRScheduler(10, lr_end=math.inf), "lr_end"),
    ],
)
def test_bad_arguments_name_the_culprit(make, culprit):
    with pytest.raises(ValueError, match=culprit):
        make()


def test_poly_refuses_lr_end_not_below_lr():
    scheduler = PolyWarmupLRScheduler(10, lr_end=0.1)
    with pytest.raises(ValueError, match=r"lr_end \(0.1\).*lr \(0.01\)"):
        scheduler._step(TrainStepInfo(SGDConfig(lr=0.01), optimization_step=5))
