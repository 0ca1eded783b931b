"""Optimizers and multi-tensor helpers (the ``onnxruntime.training.optim`` API).

- :class:`FusedAdam` with :class:`AdamWMode`: Adam / AdamW, one C++ call per param group.
- :func:`FP16_Optimizer`: float32 master weights and dynamic loss scaling for a torch optimizer
  over half-precision parameters; for DeepSpeed ZeRO and Apex optimizers, their overflow check and
  gradient norm replaced with the multi-tensor helpers.
- Multi-tensor helpers: :func:`l2_norm`, :func:`scale_`, :func:`clip_grad_norm_`,
  :func:`has_non_finite`.
"""

from .fp16_optimizer import FP16_Optimizer, MixedPrecisionOptimizer
from .fused_adam import AdamWMode, FusedAdam
from .multi_tensor import clip_grad_norm_, has_non_finite, l2_norm, scale_

__all__ = [
    "AdamWMode",
    "FP16_Optimizer",
    "FusedAdam",
    "MixedPrecisionOptimizer",
    "clip_grad_norm_",
    "has_non_finite",
    "l2_norm",
    "scale_",
]
