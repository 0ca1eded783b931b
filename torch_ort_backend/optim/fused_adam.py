"""FusedAdam: Adam / AdamW with the whole update of a param group in one C++ call.

The API is onnxruntime-training's ``FusedAdam``. Each step makes one call per (device, dtype,
step count) bucket of a group, normally one per group: a vectorised, multi-threaded float32 loop
over every parameter (csrc/training/multi_tensor_adam.cc), or the multi-tensor CUDA kernel
(kernels/fused_adam.cu) when the engine is built with CUDA. Moments are kept in float32 for
float32, float16 and bfloat16 parameters alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from enum import IntEnum
from itertools import chain
from typing import Any

import torch

from .._engine import C as _C
from .multi_tensor import DTYPE_CODES


class AdamWMode(IntEnum):
    """How weight decay enters the update (the codes of onnxruntime-training)."""

    ADAM_L2_REGULARIZATION = 0  # grad += weight_decay * p, then Adam: torch.optim.Adam(weight_decay=...)
    ADAMW_TRANSFORMERS = 1  # HuggingFace transformers' AdamW: p -= lr * weight_decay * p after the update
    ADAMW_TORCH = 2  # torch.optim.AdamW: p *= 1 - lr * weight_decay before the update


def _check_hyper_params(options: dict[str, Any], where: str) -> None:
    lr = options["lr"]
    lr = float(lr.item()) if isinstance(lr, torch.Tensor) else lr
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"{where}: invalid lr {options['lr']!r}: expected a finite number >= 0")
    eps = options["eps"]
    if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{where}: invalid eps {eps!r}: expected a finite number >= 0")
    betas = options["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"{where}: invalid betas {betas!r}: expected a pair (beta1, beta2)")
    for i, b in enumerate(betas):
        if not isinstance(b, (int, float)) or not 0.0 <= b < 1.0:
            raise ValueError(f"{where}: invalid beta parameter at index {i}: {b!r}: expected 0 <= beta < 1")
    wd = options["weight_decay"]
    if not isinstance(wd, (int, float)) or not math.isfinite(wd) or wd < 0:
        raise ValueError(f"{where}: invalid weight_decay {wd!r}: expected a finite number >= 0")
    mode = options["adam_w_mode"]
    if mode not in tuple(AdamWMode):
        raise ValueError(f"{where}: invalid adam_w_mode {mode!r}: expected one of {[m.name for m in AdamWMode]}")


class FusedAdam(torch.optim.Optimizer):
    """Adam with three weight-decay conventions, one C++ call per param group and step.

    Args:
        params: parameters or param-group dicts (float32, float16 or bfloat16, dense).
        lr: learning rate.
        bias_correction: divide the moments by (1 - beta^t).
        betas: (beta1, beta2), the moment decay rates.
        eps: added to the denominator.
        adam_w_mode: an :class:`AdamWMode`; may also be set per param group.
        weight_decay: decay factor, applied as ``adam_w_mode`` says.
        set_grad_none: what ``zero_grad()`` does without an argument: drop the gradients (True)
            or fill them with zeros.

    The state of each parameter has torch's keys ('step', 'exp_avg', 'exp_avg_sq'; the step is
    counted in an int and saved as a float32 scalar tensor like torch's), so state dicts move
    between this optimizer and torch.optim.Adam / AdamW.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        adam_w_mode: AdamWMode | int = AdamWMode.ADAMW_TRANSFORMERS,
        weight_decay: float = 0.0,
        set_grad_none: bool = True,
    ) -> None:
        defaults = dict(
            lr=lr,
            bias_correction=bias_correction,
            betas=tuple(betas) if isinstance(betas, list) else betas,
            eps=eps,
            weight_decay=weight_decay,
            adam_w_mode=adam_w_mode,
        )
        _check_hyper_params(defaults, "FusedAdam")
        # A plain int in the groups: state dicts then load with torch.load(weights_only=True).
        defaults["adam_w_mode"] = int(AdamWMode(adam_w_mode))
        self.set_grad_none = set_grad_none
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        _check_hyper_params(group, f"FusedAdam param group {len(self.param_groups) - 1}")
        group["adam_w_mode"] = int(AdamWMode(group["adam_w_mode"]))

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Also runs in load_state_dict: a state dict of torch.optim.Adam / AdamW lacks our options.
        super().__setstate__(state)
        defaults = getattr(self, "defaults", {})
        for group in self.param_groups:
            for key in ("bias_correction", "adam_w_mode"):
                if key not in group and key in defaults:
                    group[key] = defaults[key]

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)

    def state_dict(self) -> dict[str, Any]:
        # Steps are counted in plain ints here; the state dict carries them as float32 scalar
        # tensors, as torch.optim.Adam / AdamW do, so state dicts move between them.
        sd = super().state_dict()
        sd["state"] = {
            k: {**v, "step": torch.tensor(float(v["step"]))} if "step" in v else v for k, v in sd["state"].items()
        }
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for gi, group in enumerate(state_dict["param_groups"]):
            for key in ("amsgrad", "maximize"):
                if group.get(key, False):
                    raise ValueError(f"FusedAdam: param group {gi} asks for {key}=True, which FusedAdam does not do")
        super().load_state_dict(state_dict)
        # torch casts floating state to each parameter's dtype; the moments here are float32
        # whatever the parameter, so they are taken again from the saved values, unrounded. Every
        # loaded state is checked here once, so that step() can hand its buffers to C++ unchecked.
        saved = state_dict["state"]
        saved_ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        params = chain.from_iterable(g["params"] for g in self.param_groups)
        for saved_id, p in zip(saved_ids, params):
            if p not in self.state:
                continue
            state = self.state[p]
            missing = {"step", "exp_avg", "exp_avg_sq"} - set(state)
            if missing:
                raise ValueError(
                    f"FusedAdam.load_state_dict: the state of parameter {saved_id} lacks {sorted(missing)}"
                )
            state["step"] = int(float(state["step"]))
            for key in ("exp_avg", "exp_avg_sq"):
                value = saved[saved_id][key]
                if not isinstance(value, torch.Tensor) or value.shape != p.shape:
                    raise ValueError(
                        f"FusedAdam.load_state_dict: '{key}' of parameter {saved_id} has shape "
                        f"{tuple(getattr(value, 'shape', ()))}, its parameter {tuple(p.shape)}"
                    )
                state[key] = value.to(device=p.device, dtype=torch.float32, copy=True).contiguous()

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for gi, group in enumerate(self.param_groups):
            self._step_group(gi, group)
        return loss

    def _step_group(self, gi: int, group: dict[str, Any]) -> None:
        # (device, dtype, step) -> parameter indices; normally a single bucket per group.
        buckets: dict[tuple[torch.device, torch.dtype, int], list[int]] = {}
        params, grads, states = [], [], []
        for pi, p in enumerate(group["params"]):
            g = p.grad
            if g is None:
                continue
            dtype = p.dtype
            bad = g.layout is not torch.strided or g.dtype is not dtype or dtype not in DTYPE_CODES
            if bad or not p.is_contiguous():
                _raise_unsupported(p, g, f"parameter {pi} of param group {gi}")
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
                state["exp_avg_sq"] = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
            else:
                m, v = state["exp_avg"], state["exp_avg_sq"]
                if not (m.dtype is v.dtype is torch.float32 and m.shape == v.shape == p.shape and m.device == v.device
                        == p.device and m.is_contiguous() and v.is_contiguous()):
                    raise RuntimeError(
                        f"FusedAdam: the state of parameter {pi} of param group {gi} was replaced by tensors that "
                        f"are not contiguous float32 of shape {tuple(p.shape)} on {p.device}"
                    )
            step = state["step"] = int(state["step"]) + 1
            buckets.setdefault((p.device, dtype, step), []).append(len(params))
            params.append(p)
            grads.append(g if g.is_contiguous() else g.contiguous())
            states.append(state)
        if not params:
            return
        lr = group["lr"]
        lr = float(lr.item()) if isinstance(lr, torch.Tensor) else float(lr)
        beta1, beta2 = group["betas"]
        for (device, dtype, step), idx in buckets.items():
            args = (
                DTYPE_CODES[dtype],
                [params[i].data_ptr() for i in idx],
                [grads[i].data_ptr() for i in idx],
                [states[i]["exp_avg"].data_ptr() for i in idx],
                [states[i]["exp_avg_sq"].data_ptr() for i in idx],
                [params[i].numel() for i in idx],
                lr,
                float(beta1),
                float(beta2),
                float(group["eps"]),
                float(group["weight_decay"]),
                step,
                bool(group["bias_correction"]),
                int(group["adam_w_mode"]),
                1.0,
            )
            if device.type == "cpu":
                _C.multi_tensor_adam(*args, torch.get_num_threads())
            elif device.type == "cuda":
                if not hasattr(_C, "multi_tensor_adam_cuda"):
                    raise RuntimeError(
                        f"FusedAdam: param group {gi} has parameters on {device}, but torch_ort_backend was "
                        "built without CUDA (rebuild with nvcc on PATH and TOB_ENABLE_CUDA=ON)"
                    )
                _C.multi_tensor_adam_cuda(*args, torch.cuda.current_stream(device).cuda_stream)
            else:
                raise RuntimeError(f"FusedAdam: parameters on {device} are not supported (cpu and cuda are)")


def _raise_unsupported(p: torch.Tensor, g: torch.Tensor, where: str) -> None:
    if g.layout is not torch.strided:
        raise RuntimeError(
            f"FusedAdam does not support sparse gradients ({where} has a {g.layout} gradient); "
            "use torch.optim.SparseAdam for sparse embeddings"
        )
    if p.dtype not in DTYPE_CODES:
        raise TypeError(f"FusedAdam supports float32, float16 and bfloat16 parameters; {where} is {p.dtype}")
    if g.dtype is not p.dtype:
        raise TypeError(f"FusedAdam: {where} is {p.dtype} but its gradient is {g.dtype}")
    raise RuntimeError(
        f"FusedAdam needs contiguous parameters; {where} has shape {tuple(p.shape)} and strides {p.stride()}"
    )
