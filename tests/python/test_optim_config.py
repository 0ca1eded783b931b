"""optim.SGDConfig / AdamConfig / LambConfig: onnxruntime-training 1.9's defaults, parameter
groups and validation."""

import copy
import math

import pytest

from torch_ort_backend import optim
from torch_ort_backend.optim import AdamConfig, LambConfig, SGDConfig
from torch_ort_backend.optim.config import _OptimizerConfig

# The reference's documented defaults (onnxruntime.training.optim.config, v1.9).
ADAM_DEFAULTS = {
    "lr": 0.001,
    "alpha": 0.9,
    "beta": 0.999,
    "lambda_coef": 0.0,
    "epsilon": 1e-8,
    "do_bias_correction": True,
    "weight_decay_mode": AdamConfig.DecayMode.BEFORE_WEIGHT_UPDATE,
}
LAMB_DEFAULTS = {
    "lr": 0.001,
    "alpha": 0.9,
    "beta": 0.999,
    "lambda_coef": 0.0,
    "ratio_min": -math.inf,
    "ratio_max": math.inf,
    "epsilon": 1e-6,
    "do_bias_correction": True,
}


def test_names_and_defaults():
    sgd, adam, lamb = SGDConfig(), AdamConfig(), LambConfig()
    assert (sgd.name, adam.name, lamb.name) == ("SGDOptimizer", "AdamOptimizer", "LambOptimizer")
    assert sgd.defaults == {"lr": 0.001} and sgd.hyper_parameters == {}
    assert adam.defaults == ADAM_DEFAULTS
    assert lamb.defaults == LAMB_DEFAULTS
    assert adam.hyper_parameters == {k: v for k, v in ADAM_DEFAULTS.items() if k != "lr"}
    assert (adam.lr, adam.base_lrs, adam.params, adam.param_groups) == (0.001, [0.001], [], [])
    assert (adam.alpha, adam.beta, adam.lambda_coef, adam.epsilon) == (0.9, 0.999, 0.0, 1e-8)
    assert (lamb.ratio_min, lamb.ratio_max, lamb.epsilon) == (-math.inf, math.inf, 1e-6)
    assert AdamConfig.DecayMode.AFTER_WEIGHT_UPDATE == 1
    assert isinstance(adam, optim.config._OptimizerConfig)


def test_param_groups_override_and_complete():
    # The reference's docstring example, with both spellings of the argument.
    groups = [
        {"params": ["model_param0"], "alpha": 0.8, "beta": 0.7},
        {"params": ["model_param1", "model_param_2"], "alpha": 0.0},
    ]
    original = copy.deepcopy(groups)
    for config in (LambConfig(param_groups=groups, alpha=0.9, beta=0.999), LambConfig(groups, alpha=0.9, beta=0.999)):
        assert groups == original, "the caller's dicts are not modified"
        first, second = config.param_groups
        assert first == {**LAMB_DEFAULTS, "alpha": 0.8, "beta": 0.7, "params": ["model_param0"]}
        assert second == {**LAMB_DEFAULTS, "alpha": 0.0, "params": ["model_param1", "model_param_2"]}
        assert config.hyper_parameters_for("model_param_2")["alpha"] == 0.0
        assert config.hyper_parameters_for("model_param0")["beta"] == 0.7
        assert "lr" not in config.hyper_parameters_for("model_param0")
        assert config.hyper_parameters_for("not_in_a_group") == config.hyper_parameters


def test_values_are_normalised():
    adam = AdamConfig(lr=1, alpha=0, weight_decay_mode=1, params=[{"params": ["w"], "epsilon": 1}])
    assert isinstance(adam.lr, float) and isinstance(adam.alpha, float)
    assert adam.weight_decay_mode is AdamConfig.DecayMode.AFTER_WEIGHT_UPDATE
    assert adam.params[0]["epsilon"] == 1.0 and isinstance(adam.params[0]["epsilon"], float)


def test_base_class_takes_any_numeric_hyper_parameters():
    config = _OptimizerConfig(
        name="LambOptimizer",
        params=[{"params": ["model_param0", "model_param1"], "epsilon": 0.03, "beta": 0.5}],
        defaults={"lr": 0.001, "alpha": 0.01, "beta": 0.9, "epsilon": 1e-6},
    )
    assert config.params[0] == {
        "lr": 0.001, "alpha": 0.01, "beta": 0.5, "epsilon": 0.03, "params": ["model_param0", "model_param1"]
    }


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: AdamConfig(lr=-0.1), "lr"),
        (lambda: AdamConfig(lr=math.nan), "lr"),
        (lambda: AdamConfig(alpha=-0.5), "alpha"),
        (lambda: AdamConfig(beta="0.9"), "beta"),
        (lambda: AdamConfig(lambda_coef=-1.0), "lambda_coef"),
        (lambda: AdamConfig(epsilon=True), "epsilon"),
        (lambda: AdamConfig(do_bias_correction=1), "do_bias_correction"),
        (lambda: AdamConfig(weight_decay_mode=2), "weight_decay_mode"),
        (lambda: LambConfig(ratio_min=math.nan), "ratio_min"),
        (lambda: LambConfig(ratio_min=2.0, ratio_max=1.0), "ratio_min"),
        (lambda: LambConfig(params=[{"params": ["w"], "ratio_min": 5.0}], ratio_max=1.0), r"params\[0\].*ratio_min"),
        (lambda: SGDConfig(params=[{"params": ["w"], "lr": 0.1}]), "no parameter groups"),
        (lambda: AdamConfig(params={"params": ["w"]}), "list"),
        (lambda: AdamConfig(params=[["w"]]), r"params\[0\]"),
        (lambda: AdamConfig(params=[{"alpha": 0.5}]), r"params\[0\].*'params'"),
        (lambda: AdamConfig(params=[{"params": ["w"]}]), r"params\[0\] overrides no hyper-parameter"),
        (lambda: AdamConfig(params=[{"params": "w", "alpha": 0.5}]), r"params\[0\]\['params'\]"),
        (lambda: AdamConfig(params=[{"params": [], "alpha": 0.5}]), r"params\[0\]\['params'\]"),
        (lambda: AdamConfig(params=[{"params": ["w"], "lr": 0.5}]), r"params\[0\]: 'lr' cannot be set per"),
        (lambda: AdamConfig(params=[{"params": ["w"], "ratio_min": 0.5}]), r"unknown hyper-parameter 'ratio_min'"),
        (lambda: AdamConfig(params=[{"params": ["w"], "alpha": -1.0}]), r"params\[0\]\['alpha'\]"),
        (
            lambda: AdamConfig(params=[{"params": ["w", "b"], "alpha": 0.5}, {"params": ["b"], "beta": 0.5}]),
            r"params\[1\]: parameter 'b' is already in params\[0\]",
        ),
        (lambda: AdamConfig(params=[], param_groups=[]), "not both"),
        (lambda: _OptimizerConfig("RMSPropOptimizer", [], {"lr": 0.1}), "RMSPropOptimizer"),
        (lambda: _OptimizerConfig("SGDOptimizer", [], {"momentum": 0.1}), "'lr'"),
        (lambda: _OptimizerConfig("SGDOptimizer", [], {"lr": 0.1, "mode": "fast"}), "mode"),
    ],
)
def test_bad_configs_name_the_culprit(make, message):
    with pytest.raises(ValueError, match=message):
        make()
