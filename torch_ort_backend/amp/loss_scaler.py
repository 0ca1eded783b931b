"""Loss scalers: LossScaler (the base class) and DynamicLossScaler.

Same names, arguments and update rule as onnxruntime-training 1.9
(``onnxruntime.training.amp.loss_scaler``). ORTTrainer reads ``loss_scale`` before a step that
ends an accumulation window and calls ``update(train_step_info)`` after it, when
``automatic_update`` is set.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any


def _positive_float(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a finite number > 0, got {value!r}")
    return float(value)


class LossScaler:
    """Base class of a loss-scaling strategy.

    A subclass implements :meth:`update` (called with the step's TrainStepInfo, whose
    ``all_finite`` says whether every gradient was finite) and :meth:`reset`.

    Args:
        loss_scale: the scale the loss is multiplied by before the backward pass (> 0).
    """

    def __init__(self, loss_scale: float) -> None:
        self._input_name: str | None = None
        self._loss_scale = _positive_float(loss_scale, "loss_scale")

    @property
    def input_name(self) -> str | None:
        """Name of the training graph's input that receives the loss scale (set by the trainer)."""
        return self._input_name

    @input_name.setter
    def input_name(self, input_name: str) -> None:
        if not isinstance(input_name, str) or not input_name:
            raise ValueError(f"input_name must be a non-empty string, got {input_name!r}")
        self._input_name = input_name

    @property
    def loss_scale(self) -> float:
        return self._loss_scale

    @loss_scale.setter
    def loss_scale(self, loss_scale: float) -> None:
        self._loss_scale = _positive_float(loss_scale, "loss_scale")

    def reset(self) -> None:
        """Return to the initial state."""
        raise NotImplementedError(f"{type(self).__name__}.reset")

    def update(self, train_step_info: Any) -> float:
        """Update the scale from the last step's TrainStepInfo; return the new scale."""
        raise NotImplementedError(f"{type(self).__name__}.update")


class DynamicLossScaler(LossScaler):
    """The loss scale halves on overflow and doubles after ``up_scale_window`` finite steps.

    Update rule (onnxruntime-training's): after a step whose gradients were all finite, count
    one stable step; when the count reaches ``up_scale_window``, the scale becomes
    ``min(max_loss_scale, 2 * scale)`` and the count restarts. After a step with an overflow
    (``train_step_info.all_finite`` false), the scale becomes ``max(min_loss_scale, scale / 2)``
    and the count restarts.

    Args:
        automatic_update: ORTTrainer calls :meth:`update` after each optimization step; with
            False the user calls it (or never does, for a static scale).
        loss_scale: the initial scale.
        up_scale_window: finite steps in a row before the scale doubles (>= 1).
        min_loss_scale: the scale never halves below this.
        max_loss_scale: the scale never doubles above this.
    """

    def __init__(
        self,
        automatic_update: bool = True,
        loss_scale: float = float(1 << 16),
        up_scale_window: int = 2000,
        min_loss_scale: float = 1.0,
        max_loss_scale: float = float(1 << 24),
    ) -> None:
        super().__init__(loss_scale)
        if not isinstance(automatic_update, bool):
            raise ValueError(f"automatic_update must be a bool, got {automatic_update!r}")
        if isinstance(up_scale_window, bool) or not isinstance(up_scale_window, int) or up_scale_window < 1:
            raise ValueError(f"up_scale_window must be an integer >= 1, got {up_scale_window!r}")
        min_loss_scale = _positive_float(min_loss_scale, "min_loss_scale")
        max_loss_scale = _positive_float(max_loss_scale, "max_loss_scale")
        if min_loss_scale > max_loss_scale:
            raise ValueError(
                f"min_loss_scale ({min_loss_scale}) must not exceed max_loss_scale ({max_loss_scale})"
            )
        self.automatic_update = automatic_update
        self.up_scale_window = up_scale_window
        self.min_loss_scale = min_loss_scale
        self.max_loss_scale = max_loss_scale
        self._initial_loss_scale = self.loss_scale
        self._stable_steps_count = 0

    def reset(self) -> None:
        self.loss_scale = self._initial_loss_scale
        self._stable_steps_count = 0

    def update(self, train_step_info: Any) -> float:
        if train_step_info.all_finite:
            self._stable_steps_count += 1
            if self._stable_steps_count >= self.up_scale_window:
                self.loss_scale = min(self.max_loss_scale, self.loss_scale * 2.0)
                self._stable_steps_count = 0
        else:
            self.loss_scale = max(self.min_loss_scale, self.loss_scale / 2.0)
            self._stable_steps_count = 0
        return self.loss_scale
