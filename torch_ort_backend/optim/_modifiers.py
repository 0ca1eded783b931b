"""FP16_Optimizer for DeepSpeed and Apex optimizers: their overflow check and gradient-norm
computation replaced, on the given instance, with the multi-tensor helpers.

The modifier is chosen by the optimizer's type (its qualified class names, so that nothing is
imported to find out); applying it imports the library, and a clear ImportError says what is
missing when it cannot. Each replacement keeps the signature and the result conventions of the
method it replaces (DeepSpeed returns -1 for a non-finite norm, Apex's clip returns -1 after an
overflow).
"""

from __future__ import annotations

import importlib
import types
from typing import Any

import torch

from .multi_tensor import clip_grad_norm_, has_non_finite, l2_norm, scale_


def _qualified_names(obj: Any) -> set[str]:
    return {f"{cls.__module__}.{cls.__qualname__}" for cls in type(obj).__mro__}


class _Modifier:
    name = ""
    library = ""
    install_hint = ""
    type_names: tuple[str, ...] = ()
    required_methods: tuple[str, ...] = ()

    def matches(self, optimizer: Any) -> bool:
        return bool(_qualified_names(optimizer) & set(self.type_names))

    def apply(self, optimizer: Any) -> None:
        try:
            library = importlib.import_module(self.library)
        except ImportError as e:
            raise ImportError(
                f"FP16_Optimizer: {type(optimizer).__qualname__} is a {self.name} optimizer; replacing its overflow "
                f"check and gradient norm needs the '{self.library}' package, which cannot be imported ({e}). "
                f"{self.install_hint}"
            ) from e
        missing = [m for m in self.required_methods if not hasattr(optimizer, m)]
        if missing:
            version = getattr(library, "__version__", "unknown version")
            raise RuntimeError(
                f"FP16_Optimizer: this {self.name} optimizer ({self.library} {version}) has no {', '.join(missing)}; "
                "its overflow check and gradient norm cannot be replaced"
            )
        self.override(optimizer)
        optimizer._tob_fp16_modifier = self.name

    def override(self, optimizer: Any) -> None:
        raise NotImplementedError


def _bind(optimizer: Any, name: str, fn: Any) -> None:
    setattr(optimizer, name, types.MethodType(fn, optimizer))


class DeepSpeedZeROModifier(_Modifier):
    """DeepSpeed ZeRO stage 1 / 2: has_overflow_serial, has_overflow_partitioned_grads_serial,
    get_grad_norm_direct (the L2 case; the inf norm stays DeepSpeed's).

    Written against DeepSpeed 0.19 (tests/python/test_fp16_optimizer_deepspeed.py runs the real
    library): the overflow checks return a one-element bool tensor on the accelerator's current
    device (``has_overflow`` calls ``.byte()`` on it), and the norm is a float32 0-d tensor, -1
    when it is inf or NaN (``scaled_global_norm`` combines the groups' tensors).
    """

    name = "DeepSpeed ZeRO"
    library = "deepspeed"
    install_hint = "Install it with `pip install deepspeed` (requirements-dev.txt has the tested version)."
    # (stage2.FP16_DeepSpeedZeroOptimizer, its name in DeepSpeed releases older than torch 2, is not matched.)
    type_names = ("deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer",)
    required_methods = ("has_overflow_serial", "has_overflow_partitioned_grads_serial", "get_grad_norm_direct")

    def override(self, optimizer: Any) -> None:
        from deepspeed import comm as dist
        from deepspeed.accelerator import get_accelerator
        from deepspeed.runtime.utils import is_model_parallel_parameter

        original_norm = optimizer.get_grad_norm_direct

        def overflow_flag(found: bool) -> torch.Tensor:
            return torch.tensor([found], dtype=torch.bool, device=get_accelerator().current_device_name())

        def has_overflow_serial(target: Any, params: list[torch.Tensor]) -> torch.Tensor:
            return overflow_flag(has_non_finite([p.grad for p in params if p.grad is not None]))

        def has_overflow_partitioned_grads_serial(target: Any) -> torch.Tensor:
            # Every gradient of every group, the alignment padding included, as DeepSpeed's.
            grads = [g for i in range(len(target.bit16_groups)) for g in target.averaged_gradients[i] if g is not None]
            return overflow_flag(has_non_finite(grads))

        def get_grad_norm_direct(target: Any, gradients: list[torch.Tensor], params: list[torch.Tensor],
                                 norm_type: float = 2) -> torch.Tensor:
            if float(norm_type) != 2.0:
                return original_norm(gradients, params, norm_type)
            # A leading padding tensor would shift the pairing with the parameters.
            grads = [g for g in gradients if not getattr(g, "_zero_padding", False)]
            selected = [
                g for g, p in zip(grads, params)
                if not getattr(p, "ds_pipe_replicated", False)  # pipeline replicas: counted on another stage
                and (is_model_parallel_parameter(p) or target.model_parallel_rank == 0)
            ]
            sum_sq = float(l2_norm(selected).double()) ** 2 if selected else 0.0
            total = torch.tensor(sum_sq, dtype=torch.float32, device=get_accelerator().current_device_name())
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=target.dp_process_group)
            target._model_parallel_all_reduce(tensor=total, op=dist.ReduceOp.SUM)
            total = total.sqrt()
            return total.masked_fill_(~torch.isfinite(total), -1.0)

        _bind(optimizer, "has_overflow_serial", has_overflow_serial)
        _bind(optimizer, "has_overflow_partitioned_grads_serial", has_overflow_partitioned_grads_serial)
        _bind(optimizer, "get_grad_norm_direct", get_grad_norm_direct)


class ApexFP16UtilsModifier(_Modifier):
    """apex.fp16_utils.FP16_Optimizer (and Megatron-LM's copy of it): _check_overflow and
    clip_master_grads."""

    name = "Apex fp16_utils"
    library = "apex"
    install_hint = "Install NVIDIA Apex (https://github.com/NVIDIA/apex)."
    type_names = (
        "apex.fp16_utils.fp16_optimizer.FP16_Optimizer",
        "megatron.fp16.fp16.FP16_Optimizer",
    )
    required_methods = ("_check_overflow", "clip_master_grads")

    def override(self, optimizer: Any) -> None:
        def _check_overflow(target: Any) -> None:
            params = [p for g in target.fp16_groups for p in g] + [p for g in target.fp32_from_fp32_groups for p in g]
            dynamic = getattr(target, "dynamic_loss_scale", False)
            target.overflow = dynamic and has_non_finite([p.grad for p in params if p.grad is not None])

        def clip_master_grads(target: Any, max_norm: float, norm_type: float = 2) -> Any:
            if target.overflow:
                return -1
            params = [p for group in target.optimizer.param_groups for p in group["params"]]
            return clip_grad_norm_(params, max_norm, norm_type)

        _bind(optimizer, "_check_overflow", _check_overflow)
        _bind(optimizer, "clip_master_grads", clip_master_grads)


class ApexAmpModifier(_Modifier):
    """An optimizer processed by apex.amp.initialize: its loss scalers unscale the gradients and
    check them for overflow in one multi-tensor pass, and the optimizer gains
    ``clip_master_grads(max_norm, norm_type=2)`` over ``amp.master_params``. (Unscaling onto
    stashed gradients, used by gradient accumulation without zero_grad, stays Apex's.)"""

    name = "Apex amp"
    library = "apex"
    install_hint = "Install NVIDIA Apex (https://github.com/NVIDIA/apex)."

    def matches(self, optimizer: Any) -> bool:
        return hasattr(optimizer, "_amp_stash")

    def override(self, optimizer: Any) -> None:
        from apex import amp

        def unscale(scaler: Any, model_grads: list[Any], master_grads: list[Any], unused_scale: Any,
                    models_are_masters: bool = False, scale_override: float | None = None) -> None:
            if scaler._has_overflow:
                return
            scale = scaler._loss_scale if scale_override is None else scale_override
            if scale == 1.0 and models_are_masters and not scaler.dynamic:
                return
            pairs = [(m, g) for m, g in zip(model_grads, master_grads) if m is not None]
            if not pairs:
                return
            found = scale_([m for m, _ in pairs], 1.0 / scale, out=[g for _, g in pairs])
            if found and scaler.dynamic:
                scaler._has_overflow = True

        for scaler in getattr(amp._amp_state, "loss_scalers", []):
            _bind(scaler, "unscale", unscale)

        def clip_master_grads(target: Any, max_norm: float, norm_type: float = 2) -> Any:
            return clip_grad_norm_(list(amp.master_params(target)), max_norm, norm_type)

        _bind(optimizer, "clip_master_grads", clip_master_grads)


_MODIFIERS: tuple[_Modifier, ...] = (DeepSpeedZeROModifier(), ApexFP16UtilsModifier(), ApexAmpModifier())


def modifier_for(optimizer: Any) -> _Modifier | None:
    """The modifier for this optimizer's type, or None for anything else (a torch optimizer)."""
    for modifier in _MODIFIERS:
        if modifier.matches(optimizer):
            return modifier
    return None
