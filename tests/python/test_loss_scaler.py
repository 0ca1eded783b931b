"""amp.LossScaler / amp.DynamicLossScaler against onnxruntime-training 1.9's update rule.

The rule, restated here independently of the implementation: a step whose gradients are all
finite extends a run of stable steps; when the run reaches up_scale_window the scale doubles
(capped at max_loss_scale) and the run restarts. An overflow halves the scale (floored at
min_loss_scale) and restarts the run.
"""

import math

import pytest

from torch_ort_backend import amp
from torch_ort_backend.amp import DynamicLossScaler, LossScaler
from torch_ort_backend.optim import SGDConfig
from torch_ort_backend.trainer import TrainStepInfo


def expected_scales(flags, scale, window, low, high):
    """Scale after each step of `flags` (True = all finite), from the rule above, in float64."""
    out = []
    run = 0
    for finite in flags:
        if not finite:
            scale, run = max(low, scale * 0.5), 0
        elif run + 1 == window:
            scale, run = min(high, scale * 2.0), 0
        else:
            run += 1
        out.append(scale)
    return out


def replay(scaler, flags):
    info = TrainStepInfo(SGDConfig(lr=0.01))
    returned, read = [], []
    for finite in flags:
        info.all_finite = bool(finite)
        returned.append(scaler.update(info))
        read.append(scaler.loss_scale)
    return returned, read


def test_default_arguments_are_the_references():
    scaler = DynamicLossScaler()
    assert scaler.automatic_update is True
    assert scaler.loss_scale == 65536.0
    assert scaler.up_scale_window == 2000
    assert scaler.min_loss_scale == 1.0
    assert scaler.max_loss_scale == 16777216.0
    assert amp.LossScaler is LossScaler


@pytest.mark.parametrize("window", [1, 3, 7])
def test_random_overflows_follow_the_rule(rng, window):
    flags = list(rng.random(400) > 0.08)
    scaler = DynamicLossScaler(loss_scale=1024.0, up_scale_window=window, min_loss_scale=0.5, max_loss_scale=2.0**14)
    returned, read = replay(scaler, flags)
    expected = expected_scales(flags, 1024.0, window, 0.5, 2.0**14)
    assert returned == expected
    assert read == expected
    # The scale both halved and doubled along the way: every branch of the rule ran.
    moves = [b / a for a, b in zip([1024.0] + expected, expected)]
    assert 0.5 in moves and 2.0 in moves


def test_overflows_floor_at_min_and_finite_runs_cap_at_max():
    scaler = DynamicLossScaler(loss_scale=8.0, up_scale_window=2, min_loss_scale=2.0, max_loss_scale=32.0)
    returned, _ = replay(scaler, [False] * 4)
    assert returned == [4.0, 2.0, 2.0, 2.0]
    returned, _ = replay(scaler, [True] * 10)
    assert returned == [2.0, 4.0, 4.0, 8.0, 8.0, 16.0, 16.0, 32.0, 32.0, 32.0]


def test_an_overflow_restarts_the_stable_window():
    scaler = DynamicLossScaler(loss_scale=16.0, up_scale_window=3)
    returned, _ = replay(scaler, [True, True, False, True, True, True])
    # Two stable steps, overflow (halve, window restarts), then a full window of three doubles.
    assert returned == [16.0, 16.0, 8.0, 8.0, 8.0, 16.0]


def test_update_accepts_the_flag_types_a_graph_returns(rng):
    import numpy as np
    import torch

    scaler = DynamicLossScaler(loss_scale=64.0, up_scale_window=1)
    info = TrainStepInfo(SGDConfig())
    for flag, expected in ((np.bool_(False), 32.0), (torch.tensor(False), 16.0), (torch.tensor(True), 32.0)):
        info.all_finite = flag
        assert scaler.update(info) == expected


def test_reset_restores_the_initial_state():
    scaler = DynamicLossScaler(loss_scale=100.0, up_scale_window=2)
    replay(scaler, [False, True])
    assert scaler.loss_scale == 50.0
    scaler.reset()
    assert scaler.loss_scale == 100.0
    # The stable-step count was cleared too: one finite step does not complete the window.
    returned, _ = replay(scaler, [True, True])
    assert returned == [100.0, 200.0]


def test_integer_loss_scale_is_taken_as_float():
    scaler = DynamicLossScaler(loss_scale=1 << 8)
    assert scaler.loss_scale == 256.0 and isinstance(scaler.loss_scale, float)


@pytest.mark.parametrize(
    "kwargs, culprit",
    [
        ({"loss_scale": 0.0}, "loss_scale"),
        ({"loss_scale": -4.0}, "loss_scale"),
        ({"loss_scale": math.inf}, "loss_scale"),
        ({"loss_scale": "1"}, "loss_scale"),
        ({"up_scale_window": 0}, "up_scale_window"),
        ({"up_scale_window": 2.5}, "up_scale_window"),
        ({"up_scale_window": True}, "up_scale_window"),
        ({"min_loss_scale": 0.0}, "min_loss_scale"),
        ({"max_loss_scale": math.nan}, "max_loss_scale"),
        ({"min_loss_scale": 8.0, "max_loss_scale": 4.0}, "min_loss_scale"),
        ({"automatic_update": 1}, "automatic_update"),
    ],
)
def test_bad_arguments_name_the_culprit(kwargs, culprit):
    with pytest.raises(ValueError, match=culprit):
        DynamicLossScaler(**kwargs)


def test_base_class_contract():
    scaler = LossScaler(loss_scale=float(1 << 16))
    assert scaler.loss_scale == 65536.0
    with pytest.raises(NotImplementedError):
        scaler.update(TrainStepInfo(SGDConfig()))
    with pytest.raises(NotImplementedError):
        scaler.reset()
    scaler.loss_scale = 2.0
    assert scaler.loss_scale == 2.0
    with pytest.raises(ValueError, match="loss_scale"):
        scaler.loss_scale = -1.0
    assert scaler.input_name is None
    scaler.input_name = "loss_scale"
    assert scaler.input_name == "loss_scale"
    with pytest.raises(ValueError, match="input_name"):
        scaler.input_name = ""


def test_a_custom_scaler_plugs_into_the_base_class():
    class Static(LossScaler):
        def reset(self):
            pass

        def update(self, train_step_info):
            return self.loss_scale

    scaler = Static(loss_scale=128.0)
    assert scaler.update(TrainStepInfo(SGDConfig(), all_finite=False)) == 128.0
