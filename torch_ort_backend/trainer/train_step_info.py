"""TrainStepInfo: what ORTTrainer knows about the current step, for schedulers and loss scalers."""

from __future__ import annotations

from typing import Any

from ..optim.config import _OptimizerConfig


class TrainStepInfo:
    """Runtime information of the current train step (onnxruntime-training's TrainStepInfo).

    ORTTrainer keeps one instance and passes it to ``_LRScheduler._step`` and
    ``LossScaler.update``; users rarely build one (tests of custom schedulers do).

    Args:
        optimizer_config: the trainer's optimizer config (schedulers read its ``lr``).
        all_finite: whether every gradient of the last optimization step was finite.
        fetches: output names train_step / eval_step return instead of model_desc's outputs;
            [] restores the normal behaviour.
        optimization_step: optimizer updates performed so far (what lr schedulers follow).
        step: train_step calls so far (what gradient accumulation counts).
    """

    def __init__(
        self,
        optimizer_config: _OptimizerConfig,
        all_finite: bool = True,
        fetches: list[str] | None = None,
        optimization_step: int = 0,
        step: int = 0,
    ) -> None:
        if not isinstance(optimizer_config, _OptimizerConfig):
            raise ValueError(
                "optimizer_config must be an optim config (SGDConfig, AdamConfig or LambConfig), "
                f"got {type(optimizer_config).__name__}"
            )
        if not isinstance(all_finite, bool):
            raise ValueError(f"all_finite must be a bool, got {all_finite!r}")
        fetches = [] if fetches is None else fetches
        if not isinstance(fetches, list) or not all(isinstance(name, str) for name in fetches):
            raise ValueError(f"fetches must be a list of output names, got {fetches!r}")
        for name, value in (("optimization_step", optimization_step), ("step", step)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        self.optimizer_config = optimizer_config
        self.all_finite = all_finite
        self.fetches = fetches
        self.optimization_step = optimization_step
        self.step = step

    def __repr__(self) -> str:
        fields: dict[str, Any] = {
            "optimizer_config": self.optimizer_config.name,
            "all_finite": self.all_finite,
            "fetches": self.fetches,
            "optimization_step": self.optimization_step,
            "step": self.step,
        }
        return f"TrainStepInfo({', '.join(f'{k}={v!r}' for k, v in fields.items())})"
