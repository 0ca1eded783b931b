"""Loss scaling for mixed-precision training (the ``onnxruntime.training.amp`` API).

- :class:`LossScaler`: the base class of a loss-scaling strategy.
- :class:`DynamicLossScaler`: halves the scale on overflow, doubles it after a window of finite
  steps (the default scaler of ORTTrainerOptions ``mixed_precision``).
"""

from . import loss_scaler
from .loss_scaler import DynamicLossScaler, LossScaler

__all__ = ["DynamicLossScaler", "LossScaler", "loss_scaler"]
