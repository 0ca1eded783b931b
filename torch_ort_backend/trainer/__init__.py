"""ORTTrainer's Python side (the ``onnxruntime.training`` API of onnxruntime-training 1.9).

- :class:`ORTTrainer`: the whole training step as one engine graph (docs/orttrainer.md).
- :class:`ORTTrainerOptions`: every trainer setting, schema-validated, read by attribute.
- :class:`TrainStepInfo`: the step counters and overflow flag passed to lr schedulers and loss
  scalers.
- :class:`PropagateCastOpsStrategy`: values of ``graph_transformer.propagate_cast_ops_config.strategy``.

Optimizer configs and lr schedulers live in :mod:`torch_ort_backend.optim`, loss scalers in
:mod:`torch_ort_backend.amp`.
"""

from .options import ORTTrainerOptions, PropagateCastOpsStrategy
from .train_step_info import TrainStepInfo
from .trainer import ORTTrainer

__all__ = ["ORTTrainer", "ORTTrainerOptions", "PropagateCastOpsStrategy", "TrainStepInfo"]
