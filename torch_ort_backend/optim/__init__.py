"""Optimizers and multi-tensor helpers (the ``onnxruntime.training.optim`` API).

- :class:`FusedAdam` with :class:`AdamWMode`: Adam / AdamW, one C++ call per param group.
- :func:`FP16_Optimizer`: float32 master weights and dynamic loss scaling for a torch optimizer
  over half-precision parameters; for DeepSpeed ZeRO and Apex optimizers, their overflow check and
  gradient norm replaced with the multi-tensor helpers.
- Multi-tensor helpers: :func:`l2_norm`, :func:`scale_`, :func:`clip_grad_norm_`,
  :func:`has_non_finite`.
- ORTTrainer's optimizer configs :class:`SGDConfig`, :class:`AdamConfig`, :class:`LambConfig`
  (optim/config.py) and learning-rate schedulers (:mod:`.lr_scheduler`).
"""

from . import lr_scheduler
from .config import AdamConfig, LambConfig, SGDConfig
from .config import _OptimizerConfig as _OptimizerConfig  # onnxruntime-training exports it here
from .fp16_optimizer import FP16_Optimizer, MixedPrecisionOptimizer
from .fused_adam import AdamWMode, FusedAdam
from .multi_tensor import clip_grad_norm_, has_non_finite, l2_norm, scale_

__all__ = [
    "AdamConfig",
    "AdamWMode",
    "FP16_Optimizer",
    "FusedAdam",
    "LambConfig",
    "MixedPrecisionOptimizer",
    "SGDConfig",
    "clip_grad_norm_",
    "has_non_finite",
    "lr_scheduler",
    "l2_norm",
    "scale_",
]
