"""The ``onnxruntime.training`` namespace of onnxruntime-training (and ``torch_ort``'s), served by
torch_ort_backend.compat: the trainer, its options, the optimizer configs, loss scalers and ORTModule."""

from ... import amp, optim
from ...optim import FP16_Optimizer, FusedAdam
from ...ortmodule import DebugOptions, LogLevel, ORTModule
from ...trainer import ORTTrainer, ORTTrainerOptions, PropagateCastOpsStrategy, TrainStepInfo

__all__ = ["DebugOptions", "FP16_Optimizer", "FusedAdam", "LogLevel", "ORTModule", "ORTTrainer",
           "ORTTrainerOptions", "PropagateCastOpsStrategy", "TrainStepInfo", "amp", "optim"]
