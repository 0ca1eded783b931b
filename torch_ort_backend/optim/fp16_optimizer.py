"""FP16_Optimizer: mixed-precision training around an existing optimizer.

``FP16_Optimizer(optimizer, **kwargs)`` looks at what it is given:

- a DeepSpeed ZeRO optimizer (stage 1/2) or an Apex optimizer (``amp.initialize``'d, or
  ``apex.fp16_utils.FP16_Optimizer``): their overflow check and gradient-norm computation are
  replaced, on that instance, with the multi-tensor helpers; the same object is returned
  (``_modifiers.py``). The library has to be importable.
- any other ``torch.optim.Optimizer``: it is wrapped in a :class:`MixedPrecisionOptimizer`, which
  keeps float32 master weights for the float16 / bfloat16 parameters and applies dynamic loss
  scaling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from ._modifiers import modifier_for
from .multi_tensor import clip_grad_norm_, scale_

_HALF_TYPES = (torch.float16, torch.bfloat16)


class MixedPrecisionOptimizer:
    """Float32 master weights and dynamic loss scaling around a torch optimizer.

    The wrapped optimizer's param groups are switched to float32 master copies of the float16 /
    bfloat16 parameters (float32 parameters are their own masters). Each :meth:`step` unscales the
    model gradients into the master gradients and checks them for inf / NaN in the same pass; on
    overflow the step is skipped and the loss scale divided by ``scale_factor``, otherwise the
    wrapped optimizer steps, the masters are copied back into the model, and after
    ``scale_window`` steps in a row without overflow the scale grows by ``scale_factor``.

    Use ``backward(loss)`` (or ``scale_loss(loss).backward()``) instead of ``loss.backward()``.
    The scaler state is visible as ``loss_scale``, ``overflow`` (last step), ``skipped_steps``
    and ``good_steps``, and is part of ``state_dict()``.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        init_scale: float = 2.0**16,
        scale_factor: float = 2.0,
        scale_window: int = 1000,
        min_scale: float = 1.0,
        max_scale: float = 2.0**24,
        dynamic_loss_scale: bool = True,
        static_loss_scale: float = 1.0,
        clip_grad_norm: float | None = None,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"MixedPrecisionOptimizer wraps a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if scale_factor <= 1.0:
            raise ValueError(f"invalid scale_factor {scale_factor}: expected > 1")
        if scale_window < 1:
            raise ValueError(f"invalid scale_window {scale_window}: expected >= 1")
        if not 0 < min_scale <= max_scale:
            raise ValueError(f"invalid min_scale {min_scale} / max_scale {max_scale}: expected 0 < min <= max")
        if clip_grad_norm is not None and clip_grad_norm <= 0:
            raise ValueError(f"invalid clip_grad_norm {clip_grad_norm}: expected > 0 or None")
        self.optimizer = optimizer
        self.dynamic_loss_scale = dynamic_loss_scale
        self.loss_scale = float(init_scale if dynamic_loss_scale else static_loss_scale)
        if self.loss_scale <= 0:
            raise ValueError(f"invalid loss scale {self.loss_scale}: expected > 0")
        self.scale_factor = float(scale_factor)
        self.scale_window = int(scale_window)
        self.min_scale = float(min_scale)
        self.max_scale = float(max_scale)
        self.clip_grad_norm = clip_grad_norm
        self.overflow = False
        self.skipped_steps = 0
        self.good_steps = 0
        self.last_grad_norm: torch.Tensor | None = None

        # (model parameter, float32 master) for the half-precision parameters, and the float32
        # parameters that are their own masters.
        self._half_pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._fp32_params: list[torch.Tensor] = []
        for gi, group in enumerate(optimizer.param_groups):
            masters = []
            for pi, p in enumerate(group["params"]):
                if p.dtype in _HALF_TYPES:
                    master = p.detach().clone().float().requires_grad_(p.requires_grad)
                    if p in optimizer.state:
                        optimizer.state[master] = optimizer.state.pop(p)
                    self._half_pairs.append((p, master))
                    masters.append(master)
                elif p.dtype == torch.float32:
                    self._fp32_params.append(p)
                    masters.append(p)
                else:
                    raise TypeError(
                        f"FP16_Optimizer: parameter {pi} of param group {gi} is {p.dtype}; expected float16, "
                        "bfloat16 or float32"
                    )
            group["params"] = masters

    # ---- what training code calls ----

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> dict[Any, Any]:
        return self.optimizer.state

    def master_params(self) -> Iterator[torch.Tensor]:
        """The float32 parameters the wrapped optimizer updates."""
        for group in self.optimizer.param_groups:
            yield from group["params"]

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss.float() * self.loss_scale

    def backward(self, loss: torch.Tensor, retain_graph: bool = False) -> None:
        self.scale_loss(loss).backward(retain_graph=retain_graph)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for model, master in self._half_pairs:
            for p in (model, master):
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.detach_().zero_()
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Unscales, checks, (clips,) steps and copies back; returns the closure's loss, if any.

        A closure must compute the loss and call ``backward(loss)`` on this object.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        found = self._unscale_grads()
        self.overflow = found and self.dynamic_loss_scale
        if self.overflow:
            self.skipped_steps += 1
            self.good_steps = 0
            self.loss_scale = max(self.loss_scale / self.scale_factor, self.min_scale)
            return loss
        if self.clip_grad_norm is not None:
            self.last_grad_norm = clip_grad_norm_(list(self.master_params()), self.clip_grad_norm)
        self.optimizer.step()
        self._copy_masters_to_model()
        self.good_steps += 1
        if self.dynamic_loss_scale and self.good_steps % self.scale_window == 0:
            self.loss_scale = min(self.loss_scale * self.scale_factor, self.max_scale)
        return loss

    # ---- state ----

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "loss_scaler": {
                "loss_scale": self.loss_scale,
                "dynamic_loss_scale": self.dynamic_loss_scale,
                "scale_factor": self.scale_factor,
                "scale_window": self.scale_window,
                "min_scale": self.min_scale,
                "max_scale": self.max_scale,
                "good_steps": self.good_steps,
                "skipped_steps": self.skipped_steps,
                "overflow": self.overflow,
            },
            "fp32_master_params": [master.detach().clone() for _, master in self._half_pairs],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        masters = state_dict["fp32_master_params"]
        if len(masters) != len(self._half_pairs):
            raise ValueError(
                f"FP16_Optimizer.load_state_dict: the state has {len(masters)} master weights, this optimizer "
                f"{len(self._half_pairs)}"
            )
        self.optimizer.load_state_dict(state_dict["optimizer"])
        for key, value in state_dict["loss_scaler"].items():
            setattr(self, key, value)
        with torch.no_grad():
            for (_, master), saved in zip(self._half_pairs, masters):
                master.copy_(saved)

    # ---- the two passes over the gradients ----

    def _unscale_grads(self) -> bool:
        """Model gradients / loss_scale -> master gradients; True if any is inf or NaN."""
        inv_scale = 1.0 / self.loss_scale
        model_grads, master_grads = [], []
        for model, master in self._half_pairs:
            if model.grad is None:
                master.grad = None
                continue
            if master.grad is None or master.grad.shape != master.shape:
                master.grad = torch.empty_like(master)
            model_grads.append(model.grad)
            master_grads.append(master.grad)
        found = scale_(model_grads, inv_scale, out=master_grads) if model_grads else False
        fp32_grads = [p.grad for p in self._fp32_params if p.grad is not None]
        if fp32_grads:
            found = scale_(fp32_grads, inv_scale) or found
        return found

    @torch.no_grad()
    def _copy_masters_to_model(self) -> None:
        if self._half_pairs:
            scale_([m for _, m in self._half_pairs], 1.0, out=[p for p, _ in self._half_pairs])

    def __repr__(self) -> str:
        return (
            f"MixedPrecisionOptimizer({type(self.optimizer).__name__}, loss_scale={self.loss_scale}, "
            f"dynamic={self.dynamic_loss_scale}, skipped_steps={self.skipped_steps})"
        )


def FP16_Optimizer(optimizer: Any, **kwargs: Any) -> Any:  # noqa: N802 - the onnxruntime-training name
    """Mixed-precision support for ``optimizer`` (see the module docstring).

    For DeepSpeed ZeRO and Apex optimizers the same object comes back, patched. For a torch
    optimizer a :class:`MixedPrecisionOptimizer` comes back; ``kwargs`` are its options
    (``init_scale``, ``scale_factor``, ``scale_window``, ``min_scale``, ``max_scale``,
    ``dynamic_loss_scale``, ``static_loss_scale``, ``clip_grad_norm``).
    """
    modifier = modifier_for(optimizer)
    if modifier is not None:
        if kwargs:
            raise TypeError(f"FP16_Optimizer: {modifier.name} optimizers take no options, got {sorted(kwargs)}")
        modifier.apply(optimizer)
        return optimizer
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"FP16_Optimizer: expected a torch.optim.Optimizer, a DeepSpeed ZeRO (stage 1/2) optimizer or an Apex "
            f"(amp / fp16_utils) optimizer, got {type(optimizer).__module__}.{type(optimizer).__qualname__}"
        )
    return MixedPrecisionOptimizer(optimizer, **kwargs)
