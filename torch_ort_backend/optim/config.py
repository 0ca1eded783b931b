"""Optimizer configurations of ORTTrainer (``onnxruntime.training.optim`` 1.9).

A config is not an optimizer: it says which optimizer op the training graph gets
(``name``: SGDOptimizer, AdamOptimizer or LambOptimizer), its hyper-parameters, and parameter
groups that override hyper-parameters for named model parameters. Once the trainer is built,
the engine updates the weights; there is no ``step()`` or ``zero_grad()`` to call.

Parameter groups are a list of dicts, each with ``'params'`` (a list of parameter names) and at
least one hyper-parameter override; ``lr`` cannot be overridden per group (the learning rate is
one graph input, set by the lr scheduler). The reference called the argument ``params``; its
documentation calls it ``param_groups``: both spellings are accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import IntEnum, unique
from numbers import Real
from typing import Any

OPTIMIZER_NAMES = ("SGDOptimizer", "AdamOptimizer", "LambOptimizer")


def _non_negative(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _any_float(value: Any, name: str) -> float:
    """A float bound (inf allowed, NaN not)."""
    if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(value):
        raise ValueError(f"{name} must be a number (inf allowed), got {value!r}")
    return float(value)


def _boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return value


class _OptimizerConfig:
    """Base class of the optimizer configs.

    Args:
        name: the optimizer op, one of 'SGDOptimizer', 'AdamOptimizer', 'LambOptimizer'.
        params: parameter groups (see the module docstring); [] applies ``defaults`` to every
            parameter.
        defaults: every hyper-parameter with its value; must contain 'lr'.

    Attributes:
        name: the optimizer op name.
        lr: the base learning rate (what lr schedulers scale).
        defaults: the hyper-parameters, with 'lr'.
        hyper_parameters: the hyper-parameters without 'lr' (the optimizer op's attributes).
        params / param_groups: the groups, each completed with every default it does not override.
        base_lrs: ``[lr]``.
    """

    # The validator of each hyper-parameter, shared by the constructor arguments and the
    # groups' overrides; subclasses extend it.
    _CHECKS: dict[str, Callable[[Any, str], Any]] = {"lr": _non_negative}

    def __init__(self, name: str, params: list[dict[str, Any]], defaults: dict[str, Any]) -> None:
        if name not in OPTIMIZER_NAMES:
            raise ValueError(f"optimizer name must be one of {list(OPTIMIZER_NAMES)}, got {name!r}")
        if not isinstance(defaults, dict) or "lr" not in defaults:
            raise ValueError(f"defaults must be a dict with an 'lr' entry, got {defaults!r}")
        self.name = name
        self.defaults = {key: self._check(key, value, key) for key, value in defaults.items()}
        self.lr = self.defaults["lr"]
        self.base_lrs = [self.lr]
        self.params: list[dict[str, Any]] = []
        if not isinstance(params, list):
            raise ValueError(f"params (parameter groups) must be a list of dicts, got {type(params).__name__}")
        owner: dict[str, int] = {}
        for index, group in enumerate(params):
            self._add_param_group(group, index, owner)

    @property
    def hyper_parameters(self) -> dict[str, Any]:
        """The default hyper-parameters without 'lr' (the optimizer op's attributes)."""
        return {key: value for key, value in self.defaults.items() if key != "lr"}

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.params

    def hyper_parameters_for(self, param_name: str) -> dict[str, Any]:
        """The hyper-parameters (without 'lr') that apply to the model parameter `param_name`."""
        for group in self.params:
            if param_name in group["params"]:
                return {key: value for key, value in group.items() if key not in ("params", "lr")}
        return self.hyper_parameters

    def _check(self, key: str, value: Any, where: str) -> Any:
        check = self._CHECKS.get(key)
        if check is not None:
            return check(value, where)
        if type(self) is not _OptimizerConfig:
            raise ValueError(f"{where}: unknown hyper-parameter {key!r}; expected one of {sorted(self._CHECKS)}")
        # The base class configures any op: its hyper-parameters become float or int attributes.
        if not isinstance(value, (Real, bool)):
            raise ValueError(f"{where} must be a number or a bool (an optimizer attribute), got {value!r}")
        return value

    def _add_param_group(self, group: Any, index: int, owner: dict[str, int]) -> None:
        where = f"params[{index}]"
        if not isinstance(group, dict) or "params" not in group:
            raise ValueError(f"{where} must be a dict with a 'params' entry (a list of parameter names), got {group!r}")
        names = group["params"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ValueError(f"{where}['params'] must be a non-empty list of parameter names, got {names!r}")
        if len(group) < 2:
            raise ValueError(f"{where} overrides no hyper-parameter: add at least one besides 'params'")
        if "lr" in group:
            raise ValueError(f"{where}: 'lr' cannot be set per parameter group (one learning rate feeds the graph)")
        for name in names:
            if name in owner:
                raise ValueError(f"{where}: parameter {name!r} is already in params[{owner[name]}]")
            owner[name] = index
        completed = dict(self.defaults)
        for key, value in group.items():
            if key != "params":
                if key not in self.defaults:
                    raise ValueError(
                        f"{where}: unknown hyper-parameter {key!r} for {self.name}; "
                        f"expected one of {sorted(self.hyper_parameters)}"
                    )
                completed[key] = self._check(key, value, f"{where}[{key!r}]")
        completed["params"] = list(names)
        self.params.append(completed)

    def __repr__(self) -> str:
        hyper_parameters = ", ".join(f"{key}={value!r}" for key, value in self.defaults.items())
        return f"{type(self).__name__}(params={self.params!r}, {hyper_parameters})"


def _resolve_groups(params: list | None, param_groups: list | None) -> list:
    if params is not None and param_groups is not None:
        raise ValueError("give the parameter groups as params or as param_groups, not both")
    groups = params if params is not None else param_groups
    return [] if groups is None else groups


class SGDConfig(_OptimizerConfig):
    """SGD (the SGDOptimizer op): ``w -= lr * g``.

    Its only hyper-parameter is lr, which cannot be set per group, so parameter groups must be
    empty (as in onnxruntime-training).

    Args:
        params: parameter groups; must be empty.
        lr: learning rate (>= 0).
    """

    def __init__(self, params: list | None = None, lr: float = 0.001, *, param_groups: list | None = None) -> None:
        groups = _resolve_groups(params, param_groups)
        if groups != []:
            raise ValueError("SGDConfig takes no parameter groups: its only hyper-parameter, lr, is shared by all")
        super().__init__("SGDOptimizer", groups, {"lr": lr})


class AdamConfig(_OptimizerConfig):
    """Adam (the AdamOptimizer op).

    Args:
        params: parameter groups overriding the hyper-parameters below (not lr).
        lr: learning rate (>= 0).
        alpha: decay of the first moment (beta1 in torch's terms), >= 0.
        beta: decay of the second moment (beta2), >= 0.
        lambda_coef: weight decay, >= 0.
        epsilon: added to the denominator, >= 0.
        do_bias_correction: divide the moments by ``1 - alpha**t`` / ``1 - beta**t``.
        weight_decay_mode: :class:`AdamConfig.DecayMode`: decay applied before the weight
            update (added to the gradient) or after it (to the weight, AdamW-style).
        param_groups: the same as params (the documentation's spelling).
    """

    @unique
    class DecayMode(IntEnum):
        BEFORE_WEIGHT_UPDATE = 0
        AFTER_WEIGHT_UPDATE = 1

    _CHECKS = {
        "lr": _non_negative,
        "alpha": _non_negative,
        "beta": _non_negative,
        "lambda_coef": _non_negative,
        "epsilon": _non_negative,
        "do_bias_correction": _boolean,
        "weight_decay_mode": lambda value, where: AdamConfig._decay_mode(value, where),
    }

    def __init__(
        self,
        params: list | None = None,
        lr: float = 0.001,
        alpha: float = 0.9,
        beta: float = 0.999,
        lambda_coef: float = 0.0,
        epsilon: float = 1e-8,
        do_bias_correction: bool = True,
        weight_decay_mode: AdamConfig.DecayMode = DecayMode.BEFORE_WEIGHT_UPDATE,
        *,
        param_groups: list | None = None,
    ) -> None:
        defaults = {
            "lr": lr,
            "alpha": alpha,
            "beta": beta,
            "lambda_coef": lambda_coef,
            "epsilon": epsilon,
            "do_bias_correction": do_bias_correction,
            "weight_decay_mode": weight_decay_mode,
        }
        super().__init__("AdamOptimizer", _resolve_groups(params, param_groups), defaults)
        self.alpha = self.defaults["alpha"]
        self.beta = self.defaults["beta"]
        self.lambda_coef = self.defaults["lambda_coef"]
        self.epsilon = self.defaults["epsilon"]
        self.do_bias_correction = self.defaults["do_bias_correction"]
        self.weight_decay_mode = self.defaults["weight_decay_mode"]

    @staticmethod
    def _decay_mode(value: Any, where: str) -> AdamConfig.DecayMode:
        if isinstance(value, bool) or value not in tuple(AdamConfig.DecayMode):
            raise ValueError(
                f"{where} must be an AdamConfig.DecayMode ({[m.name for m in AdamConfig.DecayMode]}), got {value!r}"
            )
        return AdamConfig.DecayMode(value)


class LambConfig(_OptimizerConfig):
    """LAMB (the LambOptimizer op): Adam's update scaled per tensor by a trust ratio.

    Args:
        params: parameter groups overriding the hyper-parameters below (not lr).
        lr: learning rate (>= 0).
        alpha: decay of the first moment, >= 0.
        beta: decay of the second moment, >= 0.
        lambda_coef: weight decay, >= 0.
        ratio_min: lower bound of the trust ratio (-inf allowed).
        ratio_max: upper bound of the trust ratio (inf allowed), >= ratio_min.
        epsilon: added to the denominator, >= 0.
        do_bias_correction: divide the moments by ``1 - alpha**t`` / ``1 - beta**t``.
        param_groups: the same as params (the documentation's spelling).
    """

    _CHECKS = {
        "lr": _non_negative,
        "alpha": _non_negative,
        "beta": _non_negative,
        "lambda_coef": _non_negative,
        "ratio_min": _any_float,
        "ratio_max": _any_float,
        "epsilon": _non_negative,
        "do_bias_correction": _boolean,
    }

    def __init__(
        self,
        params: list | None = None,
        lr: float = 0.001,
        alpha: float = 0.9,
        beta: float = 0.999,
        lambda_coef: float = 0.0,
        ratio_min: float = float("-inf"),
        ratio_max: float = float("inf"),
        epsilon: float = 1e-6,
        do_bias_correction: bool = True,
        *,
        param_groups: list | None = None,
    ) -> None:
        defaults = {
            "lr": lr,
            "alpha": alpha,
            "beta": beta,
            "lambda_coef": lambda_coef,
            "ratio_min": ratio_min,
            "ratio_max": ratio_max,
            "epsilon": epsilon,
            "do_bias_correction": do_bias_correction,
        }
        super().__init__("LambOptimizer", _resolve_groups(params, param_groups), defaults)
        for where, group in [("", self.defaults)] + [(f"params[{i}]: ", g) for i, g in enumerate(self.params)]:
            if group["ratio_min"] > group["ratio_max"]:
                raise ValueError(
                    f"{where}ratio_min ({group['ratio_min']}) must not exceed ratio_max ({group['ratio_max']})"
                )
        self.alpha = self.defaults["alpha"]
        self.beta = self.defaults["beta"]
        self.lambda_coef = self.defaults["lambda_coef"]
        self.ratio_min = self.defaults["ratio_min"]
        self.ratio_max = self.defaults["ratio_max"]
        self.epsilon = self.defaults["epsilon"]
        self.do_bias_correction = self.defaults["do_bias_correction"]
