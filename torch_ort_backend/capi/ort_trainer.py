"""The legacy ``onnxruntime.capi.ort_trainer`` API (onnxruntime-training <= 1.9, the getting-started
sample): IODescription, ModelDescription and the positional ORTTrainer, as a thin layer over
torch_ort_backend.trainer.ORTTrainer (one engine, one exporter, one training graph).

Differences from the new API, as the original behaved: the learning rate is the last train_step
input (or comes from ``get_lr_this_step(global_step)``); dtypes and shapes come from the tensors
given, not from the descriptions (the sample declares token ids as float32 and a label shape that is
not the target's), with one warning where they disagree; every dimension is dynamic; train_step and
eval_step return the description's outputs as a list (``results[0]`` is the loss).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Sequence

import torch

from ..amp.loss_scaler import LossScaler
from ..optim.config import AdamConfig, LambConfig, SGDConfig
from ..trainer.options import ORTTrainerOptions
from ..trainer.trainer import ORTTrainer as _Trainer

logger = logging.getLogger("torch_ort_backend")

_OPTIMIZERS = {"SGDOptimizer": SGDConfig, "AdamOptimizer": AdamConfig, "LambOptimizer": LambConfig}
# The legacy attribute names of map_optimizer_attributes -> the configs' hyper-parameter names.
_ATTRIBUTE_NAMES = {"lambda": "lambda_coef"}


class IODescription:
    def __init__(self, name: str, shape: Sequence[int | str], dtype: torch.dtype | None = None,
                 num_classes: int | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"IODescription name must be a non-empty string, got {name!r}")
        if not isinstance(shape, (list, tuple)):
            raise ValueError(f"IODescription '{name}': shape must be a list, got {shape!r}")
        self.name_ = name
        self.shape_ = list(shape)
        self.dtype_ = dtype
        self.num_classes_ = num_classes


class ModelDescription:
    def __init__(self, inputs: Sequence[IODescription], outputs: Sequence[IODescription]) -> None:
        for kind, items in (("inputs", inputs), ("outputs", outputs)):
            if not items or not all(isinstance(i, IODescription) for i in items):
                raise ValueError(f"ModelDescription {kind} must be a non-empty list of IODescription")
        self.inputs_ = list(inputs)
        self.outputs_ = list(outputs)


class ORTTrainer:
    def __init__(self, model: torch.nn.Module, loss_fn: Callable | None, model_desc: ModelDescription,
                 training_optimizer_name: str, map_optimizer_attributes: Callable[[str], dict] | None,
                 learning_rate_description: IODescription, device: Any, gradient_accumulation_steps: int = 1,
                 world_rank: int = 0, world_size: int = 1, use_mixed_precision: bool = False,
                 allreduce_post_accumulation: bool = False, global_step: int = 0,
                 get_lr_this_step: Callable[[int], float] | None = None, loss_scaler: Any = None,
                 deepspeed_zero_stage: int = 0, enable_grad_norm_clip: bool = True,
                 frozen_weights: Sequence[str] = (), _opset_version: int = 14,
                 _enable_internal_postprocess: bool = True, _extra_postprocess: Callable | None = None,
                 _use_deterministic_compute: bool = False, use_memory_efficient_gradient: bool = False,
                 run_symbolic_shape_infer: bool = False, enable_adasum: bool = False,
                 optimized_model_filepath: str = "") -> None:
        if not isinstance(model_desc, ModelDescription):
            raise TypeError(f"model_desc must be a ModelDescription, got {type(model_desc).__name__}")
        if training_optimizer_name not in _OPTIMIZERS:
            raise ValueError(f"training_optimizer_name must be one of {sorted(_OPTIMIZERS)}, "
                             f"got {training_optimizer_name!r}")
        if not isinstance(learning_rate_description, IODescription):
            raise TypeError("learning_rate_description must be an IODescription")
        dev = torch.device(device) if not isinstance(device, torch.device) else device
        if dev.type != "cpu":
            raise ValueError(f"device {dev} is not supported by this build; use 'cpu'")
        if loss_scaler is not None and not use_mixed_precision:
            raise ValueError("loss_scaler is only used with use_mixed_precision=True")
        if loss_scaler is not None and not isinstance(loss_scaler, LossScaler):
            raise TypeError("loss_scaler must be a torch_ort_backend.amp.LossScaler (e.g. amp.DynamicLossScaler), got "
                            f"{type(loss_scaler).__name__}")
        self.model_desc = model_desc
        self.learning_rate_description = learning_rate_description
        self.training_optimizer_name = training_optimizer_name
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.global_step = global_step
        self.get_lr_this_step = get_lr_this_step
        self.enable_grad_norm_clip = enable_grad_norm_clip
        self.frozen_weights = list(frozen_weights)
        self.world_rank, self.world_size = world_rank, world_size
        self.use_mixed_precision = use_mixed_precision
        self._model = model
        self._loss_fn = loss_fn
        self._config = self._optimizer_config(model, training_optimizer_name, map_optimizer_attributes)
        self._options = ORTTrainerOptions({
            "batch": {"gradient_accumulation_steps": gradient_accumulation_steps},
            "device": {"id": "cpu"},
            "distributed": {"world_rank": world_rank, "world_size": world_size,
                            "allreduce_post_accumulation": allreduce_post_accumulation,
                            "deepspeed_zero_optimization": {"stage": deepspeed_zero_stage},
                            "enable_adasum": enable_adasum},
            "mixed_precision": {"enabled": use_mixed_precision, "loss_scaler": loss_scaler},
            "utils": {"frozen_weights": list(frozen_weights), "grad_norm_clip": enable_grad_norm_clip,
                      "memory_efficient_gradient": use_memory_efficient_gradient,
                      "run_symbolic_shape_infer": run_symbolic_shape_infer},
            "debug": {"deterministic_compute": _use_deterministic_compute,
                      "graph_save_paths": {"model_with_training_graph_after_optimization_path":
                                           optimized_model_filepath}},
            "_internal_use": {"onnx_opset_version": _opset_version,
                              "enable_internal_postprocess": _enable_internal_postprocess,
                              "extra_postprocess": _extra_postprocess},
        })
        self._trainer: _Trainer | None = None
        self._warned = False

    @staticmethod
    def _optimizer_config(model, name: str, attributes: Callable[[str], dict] | None):
        cls = _OPTIMIZERS[name]
        if attributes is None or cls is SGDConfig:
            return cls()
        groups: dict[tuple, list[str]] = {}
        for pname, _ in model.named_parameters():
            attrs = attributes(pname)
            if not isinstance(attrs, dict):
                raise TypeError(f"map_optimizer_attributes('{pname}') must return a dict, got {type(attrs).__name__}")
            mapped = tuple(sorted((_ATTRIBUTE_NAMES.get(k, k), v) for k, v in attrs.items()))
            groups.setdefault(mapped, []).append(pname)
        param_groups = [{"params": names, **dict(key)} for key, names in groups.items() if key]
        return cls(param_groups=param_groups)

    # ---- the description, completed from the first tensors ----
    def _new_desc(self, tensors: list[torch.Tensor]) -> dict:
        inputs = []
        for k, (d, t) in enumerate(zip(self.model_desc.inputs_, tensors)):
            declared = tuple(d.shape_)
            if (len(declared) != t.dim() or any(isinstance(s, int) and s != t.shape[i] for i, s in enumerate(declared))
                    or (d.dtype_ is not None and d.dtype_ != t.dtype)):
                self._warn(f"input '{d.name_}' is described as {d.dtype_}{list(declared)} but given as "
                           f"{t.dtype}{list(t.shape)}: the tensor's dtype and shape are used")
            # Every dimension is dynamic (the original re-exported on a new shape).
            shape = [s if isinstance(s, str) and len(declared) == t.dim() else f"{d.name_}_dim{i}"
                     for i, s in enumerate(declared if len(declared) == t.dim() else range(t.dim()))]
            inputs.append((d.name_, shape))
        outputs = [(o.name_, [f"{o.name_}_dim{i}" for i in range(len(o.shape_))], i == 0)
                   for i, o in enumerate(self.model_desc.outputs_)]
        return {"inputs": inputs, "outputs": outputs}

    def _warn(self, message: str) -> None:
        if not self._warned:
            warnings.warn(f"ORTTrainer (legacy API): {message}; later mismatches are not reported", stacklevel=4)
            self._warned = True

    def _ensure(self, tensors: list[torch.Tensor]) -> _Trainer:
        if self._trainer is None:
            self._trainer = _Trainer(self._model, self._new_desc(tensors), self._config, loss_fn=self._loss_fn,
                                     options=self._options)
        return self._trainer

    def _split(self, args: tuple, kwargs: dict, with_lr: bool) -> tuple[list[torch.Tensor], float | None]:
        names = [d.name_ for d in self.model_desc.inputs_]
        lr_name = self.learning_rate_description.name_
        values = list(args)
        for k, v in kwargs.items():
            if k == lr_name:
                continue
            if k not in names:
                raise ValueError(f"unknown input '{k}'; the description's inputs are {names} (+ '{lr_name}')")
        lr = kwargs.get(lr_name)
        if len(values) > len(names):
            if not with_lr or len(values) != len(names) + 1:
                raise ValueError(f"{len(values)} inputs given; expected {names}" + (f" and '{lr_name}'" if with_lr else ""))
            lr = values.pop()
        for n in names[len(values):]:
            if n not in kwargs:
                raise ValueError(f"missing input '{n}'; the description's inputs are {names}")
            values.append(kwargs[n])
        if with_lr:
            if self.get_lr_this_step is not None:
                lr = self.get_lr_this_step(self.global_step)
            if lr is None:
                raise ValueError(f"train_step needs the learning rate '{lr_name}' as its last input "
                                 "(or get_lr_this_step)")
            lr = float(lr.reshape(-1)[0]) if isinstance(lr, torch.Tensor) else float(lr)
        return values, lr

    def train_step(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        fetches = kwargs.pop("fetches", None)
        tensors, lr = self._split(args, kwargs, with_lr=True)
        trainer = self._ensure(tensors)
        trainer._train_step_info.fetches = list(fetches) if fetches else []
        inputs = trainer._inputs(tuple(tensors), {})
        results = trainer._train_step(inputs, lr)
        if trainer._train_step_info.step % self.gradient_accumulation_steps == 0:
            self.global_step += 1
        return list(results)

    def eval_step(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        fetches = kwargs.pop("fetches", None)
        tensors, _ = self._split(args, kwargs, with_lr=False)
        trainer = self._ensure(tensors)
        trainer._train_step_info.fetches = list(fetches) if fetches else []
        results = trainer.eval_step(*tensors)
        return list(results) if isinstance(results, (list, tuple)) else [results]

    def state_dict(self) -> dict:
        if self._trainer is None:
            return {n: t.detach().clone() for n, t in self._model.state_dict().items()}
        return self._trainer.state_dict(pytorch_format=True)

    def load_state_dict(self, state_dict: dict, strict: bool = False) -> None:
        if self._trainer is None:
            self._model.load_state_dict(state_dict, strict=strict)
        else:
            self._trainer.load_state_dict(state_dict, strict=strict)

    def save_as_onnx(self, path: str) -> None:
        if self._trainer is None:
            raise RuntimeWarning("no train_step or eval_step has run yet: there is no ONNX model to save")
        self._trainer.save_as_onnx(path)
