"""Learning-rate schedulers of ORTTrainer (``onnxruntime.training.optim.lr_scheduler``).

Each scheduler maps the trainer's ``TrainStepInfo`` (its ``optimization_step`` and the optimizer
config's base ``lr``) to the learning rate fed to the training graph for that step. The formulas
are onnxruntime-training 1.9's, which follow HuggingFace Transformers' warmup schedules. With
``num_warmup_steps = warmup * total_steps`` and ``step = train_step_info.optimization_step``,
during warmup (``step < num_warmup_steps``) every scheduler gives
``lr * step / max(1, num_warmup_steps)``; after it:

- Constant: ``lr``
- Cosine: ``lr * max(0, 0.5 * (1 + cos(pi * cycles * 2 * progress)))`` with
  ``progress = (step - num_warmup_steps) / max(1, total_steps - num_warmup_steps)``
- Linear: ``lr * max(0, total_steps - step) / max(1, total_steps - num_warmup_steps)``
- Poly: ``(lr - lr_end) * (1 - (step - num_warmup_steps) / (total_steps - num_warmup_steps)) ** power
  + lr_end``, and ``lr_end`` once ``step > total_steps``

The schedulers are stateless apart from the last rate they returned (``get_last_lr``): resuming
from a checkpoint only needs the trainer's ``optimization_step``.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any


def _check_total_steps(total_steps: Any) -> int:
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"total_steps must be an integer >= 1, got {total_steps!r}")
    return total_steps


def _check_real(value: Any, name: str, *, low: float, low_inclusive: bool = True, high: float | None = None) -> float:
    """`value` as a float when it is a real number (not a bool) within [low, high); else ValueError."""
    bounds = f"{'>=' if low_inclusive else '>'} {low}" + ("" if high is None else f" and < {high}")
    if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(value):
        raise ValueError(f"{name} must be a number {bounds}, got {value!r}")
    too_low = value < low if low_inclusive else value <= low
    too_high = high is not None and value >= high
    if too_low or too_high or math.isinf(value):
        raise ValueError(f"{name} must be a finite number {bounds}, got {value!r}")
    return float(value)


class _LRScheduler:
    """Base class of a learning-rate scheduler.

    A subclass implements :meth:`get_lr`. ORTTrainer calls :meth:`_step` once per train step,
    before the run, and feeds the first rate of the returned list to the graph.
    Per-parameter-group rates are not supported (as in onnxruntime-training): the list has one
    entry, the rate of every parameter.
    """

    def __init__(self) -> None:
        self._last_lr: list[float] = []

    def _step(self, train_step_info: Any) -> list[float]:
        """The trainer's hook: compute the rate for this step and remember it."""
        new_lr = self.get_lr(train_step_info)
        self._last_lr = new_lr
        return new_lr

    def get_lr(self, train_step_info: Any) -> list[float]:
        """The learning rates for the step described by `train_step_info` (a one-entry list)."""
        raise NotImplementedError(f"{type(self).__name__}.get_lr")

    def get_last_lr(self) -> list[float]:
        """The rates computed by the last :meth:`_step` (empty before the first step)."""
        return self._last_lr


class _WarmupLRScheduler(_LRScheduler):
    """Shared part of the four schedulers: total_steps, warmup fraction, the linear warmup."""

    def __init__(self, total_steps: int, warmup: float) -> None:
        super().__init__()
        self.total_steps = _check_total_steps(total_steps)
        self.warmup = _check_real(warmup, "warmup", low=0.0, high=1.0)
        self._num_warmup_steps = self.warmup * self.total_steps

    def _in_warmup(self, step: int) -> bool:
        return step < self._num_warmup_steps

    def _warmup_factor(self, step: int) -> float:
        return float(step) / float(max(1, self._num_warmup_steps))

    def _factor(self, train_step_info: Any) -> float:
        raise NotImplementedError

    def get_lr(self, train_step_info: Any) -> list[float]:
        return [train_step_info.optimizer_config.lr * self._factor(train_step_info)]


class ConstantWarmupLRScheduler(_WarmupLRScheduler):
    """Linear warmup from 0 to the optimizer's lr, then constant.

    Args:
        total_steps: optimization steps of the whole training (>= 1).
        warmup: fraction of total_steps spent warming up, in [0, 1).
    """

    def __init__(self, total_steps: int, warmup: float = 0.002) -> None:
        super().__init__(total_steps, warmup)

    def _factor(self, train_step_info: Any) -> float:
        step = train_step_info.optimization_step
        return self._warmup_factor(step) if self._in_warmup(step) else 1.0


class CosineWarmupLRScheduler(_WarmupLRScheduler):
    """Linear warmup, then a cosine decay from the optimizer's lr towards 0.

    Args:
        total_steps: optimization steps of the whole training (>= 1).
        cycles: number of cosine waves after warmup (> 0); 0.5 decays to 0 at total_steps.
        warmup: fraction of total_steps spent warming up, in [0, 1).
    """

    def __init__(self, total_steps: int, cycles: float = 0.5, warmup: float = 0.002) -> None:
        super().__init__(total_steps, warmup)
        self.cycles = _check_real(cycles, "cycles", low=0.0, low_inclusive=False)

    def _factor(self, train_step_info: Any) -> float:
        step = train_step_info.optimization_step
        if self._in_warmup(step):
            return self._warmup_factor(step)
        progress = float(step - self._num_warmup_steps) / float(max(1, self.total_steps - self._num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * self.cycles * 2.0 * progress)))


class LinearWarmupLRScheduler(_WarmupLRScheduler):
    """Linear warmup, then a linear decay from the optimizer's lr to 0 at total_steps.

    Args:
        total_steps: optimization steps of the whole training (>= 1).
        warmup: fraction of total_steps spent warming up, in [0, 1).
    """

    def __init__(self, total_steps: int, warmup: float = 0.002) -> None:
        super().__init__(total_steps, warmup)

    def _factor(self, train_step_info: Any) -> float:
        step = train_step_info.optimization_step
        if self._in_warmup(step):
            return self._warmup_factor(step)
        return max(0.0, float(self.total_steps - step) / float(max(1, self.total_steps - self._num_warmup_steps)))


class PolyWarmupLRScheduler(_WarmupLRScheduler):
    """Linear warmup, then a polynomial decay from the optimizer's lr to lr_end at total_steps.

    Args:
        total_steps: optimization steps of the whole training (>= 1).
        lr_end: the rate at and after total_steps (>= 0, below the optimizer's lr).
        power: exponent of the decay (>= 0); 1.0 is linear.
        warmup: fraction of total_steps spent warming up, in [0, 1).
    """

    def __init__(self, total_steps: int, lr_end: float = 1e-7, power: float = 1.0, warmup: float = 0.002) -> None:
        super().__init__(total_steps, warmup)
        self.lr_end = _check_real(lr_end, "lr_end", low=0.0)
        self.power = _check_real(power, "power", low=0.0)

    def _factor(self, train_step_info: Any) -> float:
        lr = train_step_info.optimizer_config.lr
        if not lr > self.lr_end:
            raise ValueError(
                f"PolyWarmupLRScheduler: lr_end ({self.lr_end}) must be smaller than the optimizer's lr ({lr})"
            )
        step = train_step_info.optimization_step
        if self._in_warmup(step):
            return self._warmup_factor(step)
        if step > self.total_steps:
            return self.lr_end / lr
        decay_steps = self.total_steps - self._num_warmup_steps
        pct_remaining = 1.0 - (step - self._num_warmup_steps) / decay_steps
        return ((lr - self.lr_end) * pct_remaining**self.power + self.lr_end) / lr
