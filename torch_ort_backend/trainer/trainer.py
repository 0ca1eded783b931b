"""ORTTrainer: onnxruntime-training's trainer on our engine. One engine run per train_step executes the
forward, the loss, the gradients and the optimizer update (trainer/optimizer_graph.py); weights,
moments and step counts are engine state bound once, updated in place by the run.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import onnx
import torch
from torch import nn

from ..optim.config import _OptimizerConfig
from . import checkpoint as _checkpoint
from .compiled_step import StepGraphs
from . import mixed_precision as _mixed_precision
from .distributed import data_parallel
from .model_desc import ModelDesc, parse_model_desc
from .options import ORTTrainerOptions
from .train_step_info import TrainStepInfo
from .trainer_state import TrainerState
from .training_graph import ModelWithLoss

logger = logging.getLogger("torch_ort_backend")


class ORTTrainer:
    """PyTorch front end of the engine's training: the whole step as one engine graph.

    Args:
        model: a torch.nn.Module (or an onnx.ModelProto whose outputs include the loss).
        model_desc: ``{'inputs': [(name, shape)], 'outputs': [(name, shape, is_loss)]}``; string
            dimensions are dynamic.
        optim_config: optim.SGDConfig, optim.AdamConfig or optim.LambConfig.
        loss_fn: ``loss_fn(prediction, label) -> scalar``; the label is the last input and the loss
            the first output of the description.
        options: ORTTrainerOptions.
    """

    def __init__(self, model: nn.Module | onnx.ModelProto, model_desc: dict, optim_config: _OptimizerConfig,
                 loss_fn: Callable | None = None, options: ORTTrainerOptions | None = None) -> None:
        if isinstance(model, onnx.ModelProto):
            from .onnx_model import module_from_onnx

            model = module_from_onnx(model)
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module or an onnx.ModelProto, got {type(model).__name__}")
        if not isinstance(optim_config, _OptimizerConfig):
            raise TypeError("optim_config must be an optim.SGDConfig, optim.AdamConfig or optim.LambConfig, "
                            f"got {type(optim_config).__name__}")
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable (prediction, label) -> loss, got {type(loss_fn).__name__}")
        if options is None:
            options = ORTTrainerOptions()
        elif isinstance(options, dict):
            options = ORTTrainerOptions(options)
        elif not isinstance(options, ORTTrainerOptions):
            raise TypeError(f"options must be an ORTTrainerOptions, got {type(options).__name__}")
        unsupported = options.unsupported_settings()
        if unsupported:
            raise NotImplementedError("ORTTrainer does not support these settings yet: " + "; ".join(unsupported))
        dp = data_parallel(options)  # checks the distributed group against torch.distributed now
        self.model_desc: ModelDesc = parse_model_desc(model_desc)
        if loss_fn is not None and self.model_desc.loss_index != 0:
            raise ValueError("with a loss_fn the loss is the first output of model_desc (the combined model returns "
                             f"the loss, then the model's outputs); '{self.model_desc.outputs[0].name}' is first")
        self.optim_config = optim_config
        self.loss_fn = loss_fn
        self.options = options
        self._torch_model = model
        self._train_step_info = TrainStepInfo(optim_config)
        frozen = list(options.utils.frozen_weights)
        names = {n for n, _ in model.named_parameters()}
        missing = [n for n in frozen if n not in names]
        if missing:
            raise RuntimeError(f"utils.frozen_weights names {missing}, which the model does not have; its parameters "
                               f"are {sorted(names)}")
        # ZeRO stage 1 partitions the optimizer states over the data-parallel ranks; on one rank there
        # is nothing to partition.
        zero = options.distributed.deepspeed_zero_optimization.stage >= 1 and dp is not None
        self._state = TrainerState(model, optim_config, frozen, options.batch.gradient_accumulation_steps > 1,
                                   zero_ranks=(dp.world_size, options.distributed.world_rank) if zero else None)
        self._mixed_precision = _mixed_precision.configure(options, self.model_desc)
        if self._mixed_precision is None:
            wrapper = ModelWithLoss(model, loss_fn, self.model_desc.loss_index,
                                    input_names=self.model_desc.input_names)
        else:
            wrapper = _mixed_precision.AutocastModelWithLoss(model, loss_fn, self.model_desc.loss_index,
                                                             self._mixed_precision.dtype,
                                                             input_names=self.model_desc.input_names)
        self._graphs = StepGraphs(wrapper, self.model_desc, optim_config, options, self._state, self._mixed_precision)

    # ---- onnxruntime-training's attributes ----
    @property
    def _onnx_model(self) -> onnx.ModelProto | None:
        step = self._graphs.first()
        return None if step is None else step.training.update.model

    # ---- steps ----
    def train_step(self, *args: Any, **kwargs: Any) -> Any:
        """Runs forward, loss, gradients and (every gradient_accumulation_steps calls) the optimizer
        update; returns the description's outputs (a single output bare)."""
        results = self._train_step(self._inputs(args, kwargs), None)
        return results[0] if len(results) == 1 else results

    def _train_step(self, inputs: list[torch.Tensor], lr: float | None) -> list[torch.Tensor]:
        """One step at `lr` (None: the lr scheduler's, else the optimizer config's)."""
        step = self._graphs.for_inputs(inputs, train=True)
        info = self._train_step_info
        info.step += 1
        accumulate = info.step % self.options.batch.gradient_accumulation_steps != 0
        if lr is None:
            lr = self.optim_config.lr
            if self.options.lr_scheduler is not None:
                lr = self.options.lr_scheduler._step(info)[0]
        scaler = None if self._mixed_precision is None else self._mixed_precision.loss_scaler
        try:
            results = step.run_train(inputs, lr, accumulate, self._fetches(), self.model_desc.input_names,
                                     loss_scale=None if scaler is None else scaler.loss_scale)
        except BaseException:
            info.step -= 1
            raise
        if not accumulate:
            if scaler is not None:
                # As the reference: the scaler sees every update's overflow flag; a skipped update is
                # not an optimization step (schedulers do not advance).
                info.all_finite = step.last_all_finite
                if getattr(scaler, "automatic_update", True):
                    scaler.update(info)
            if info.all_finite:
                info.optimization_step += 1
        return results

    def eval_step(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the model (with its loss) in eval mode; returns the description's outputs."""
        inputs = self._inputs(args, kwargs)
        step = self._graphs.for_inputs(inputs, train=False)
        results = step.run_eval(inputs, self._fetches(), self.model_desc.input_names)
        return results[0] if len(results) == 1 else results

    def _fetches(self) -> list[str]:
        fetches = list(self._train_step_info.fetches or [])
        if not fetches:
            return self.model_desc.output_names
        unknown = [f for f in fetches if f not in self.model_desc.output_names]
        if unknown:
            raise RuntimeError(f"TrainStepInfo.fetches names {unknown}, which are not outputs of model_desc "
                               f"{self.model_desc.output_names}")
        return fetches

    def _inputs(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        names = self.model_desc.input_names
        if len(args) > len(names):
            raise ValueError(f"{len(args)} positional inputs given; model_desc describes {len(names)}: {names}")
        values = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise ValueError(f"unknown input '{k}'; model_desc's inputs are {names}")
            if k in values:
                raise ValueError(f"input '{k}' given twice (positionally and by name)")
            values[k] = v
        missing = [n for n in names if n not in values]
        if missing:
            raise ValueError(f"missing inputs {missing}; model_desc's inputs are {names}")
        ordered = [values[n] for n in names]
        sizes: dict[str, tuple[int, str]] = {}
        for d, t in zip(self.model_desc.inputs, ordered):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"input '{d.name}' must be a torch.Tensor, got {type(t).__name__}")
            if t.device.type != "cpu":
                raise ValueError(f"input '{d.name}' is on {t.device}; this trainer runs on the CPU")
            if t.dim() != len(d.shape):
                raise ValueError(f"input '{d.name}' has rank {t.dim()} (shape {list(t.shape)}); model_desc declares "
                                 f"shape {list(d.shape)}")
            for axis, want in enumerate(d.shape):
                got = t.shape[axis]
                if isinstance(want, int) and got != want:
                    raise ValueError(f"input '{d.name}' has size {got} at dimension {axis}; model_desc declares {want}")
                if isinstance(want, str):
                    seen = sizes.setdefault(want, (got, d.name))
                    if seen[0] != got:
                        raise ValueError(f"dimension '{want}' is {seen[0]} in input '{seen[1]}' but {got} in "
                                         f"input '{d.name}'")
        return ordered

    # ---- state ----
    def state_dict(self, pytorch_format: bool = False) -> dict:
        """The trainer's state: with pytorch_format, ``{name: tensor}`` of the model's parameters and
        buffers; else onnxruntime-training's structure (model / optimizer / trainer_options /
        train_step_info, numpy arrays)."""
        if pytorch_format:
            return self._state.pytorch_state_dict()
        return self._state.state_dict(self._train_step_info, self.options)

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> None:
        """Loads a state_dict(pytorch_format=False) (or a pytorch_format one: model state only).
        Everything is checked before anything changes: a failed load leaves the trainer as it was."""
        self._state.load_state_dict(state_dict, strict, self._train_step_info, self.options)

    def save_checkpoint(self, path: str, user_dict: dict | None = None, include_optimizer_states: bool = True) -> None:
        """Writes the state_dict and `user_dict` to `path` (refuses an existing path)."""
        sd = self.state_dict()
        if not include_optimizer_states:
            sd.pop("optimizer", None)
        _checkpoint.save(path, sd, {} if user_dict is None else user_dict)

    def load_checkpoint(self, *paths: str, strict: bool = True) -> dict:
        """Loads checkpoint file(s) (sharded ones are aggregated); returns the saved user_dict."""
        sd, user_dict = _checkpoint.load(paths)
        self.load_state_dict(sd, strict=strict and "optimizer" in sd)
        return user_dict

    def save_as_onnx(self, path: str) -> None:
        """Writes the training graph (forward, loss, gradients and optimizer) with the current weights
        and optimizer state as initializers."""
        step = self._graphs.first()
        if step is None:
            raise RuntimeWarning("no train_step or eval_step has run yet: there is no ONNX model to save")
        if not isinstance(path, str) or not path:
            raise ValueError(f"path must be a non-empty file path, got {path!r}")
        onnx.save(step.training_model_with_state(self._state), path)

    # ---- legacy conveniences ----
    def _model_parameter_names(self) -> list[str]:
        return [n for n, _ in self._torch_model.named_parameters()]

