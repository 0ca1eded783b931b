"""ORTTrainerOptions against onnxruntime-training 1.9's schema, and TrainStepInfo.

EXPECTED_DEFAULTS is the reference's schema (shared/reference/orttrainer_api_reference.txt and
orttrainer_options.py of v1.9), written out here with our documented differences: opset 14 in
12..21, device.id by availability.
"""

import math
import subprocess
import sys

import pytest
import torch

import torch_ort_backend
from torch_ort_backend import ORTTrainerOptions, SessionOptions, amp, optim
from torch_ort_backend.optim import AdamConfig, SGDConfig, lr_scheduler
from torch_ort_backend.trainer import PropagateCastOpsStrategy, TrainStepInfo
from torch_ort_backend.trainer import unsupported_options

EXPECTED_DEFAULTS = {
    "batch": {"gradient_accumulation_steps": 1},
    "device": {"id": "cuda" if torch.cuda.is_available() else "cpu", "mem_limit": 0},
    "distributed": {
        "world_rank": 0,
        "world_size": 1,
        "local_rank": 0,
        "data_parallel_size": 1,
        "horizontal_parallel_size": 1,
        "pipeline_parallel": {
            "pipeline_parallel_size": 1,
            "num_pipeline_micro_batches": 1,
            "pipeline_cut_info_string": "",
            "sliced_schema": {},
            "sliced_axes": {},
            "sliced_tensor_names": [],
        },
        "allreduce_post_accumulation": False,
        "deepspeed_zero_optimization": {"stage": 0},
        "enable_adasum": False,
    },
    "lr_scheduler": None,
    "mixed_precision": {"enabled": False, "loss_scaler": None, "dtype": "float16"},
    "graph_transformer": {
        "attn_dropout_recompute": False,
        "gelu_recompute": False,
        "transformer_layer_recompute": False,
        "number_recompute_layers": 0,
        "allow_layer_norm_mod_precision": False,
        "propagate_cast_ops_config": {"strategy": PropagateCastOpsStrategy.FLOOD_FILL, "level": 1, "allow": []},
    },
    "utils": {
        "frozen_weights": [],
        "grad_norm_clip": True,
        "memory_efficient_gradient": False,
        "run_symbolic_shape_infer": False,
    },
    "debug": {
        "deterministic_compute": False,
        "check_model_export": False,
        "graph_save_paths": {
            "model_after_graph_transforms_path": "",
            "model_with_gradient_graph_path": "",
            "model_with_training_graph_path": "",
            "model_with_training_graph_after_optimization_path": "",
        },
    },
    "_internal_use": {
        "enable_internal_postprocess": True,
        "extra_postprocess": None,
        "onnx_opset_version": 14,
        "enable_onnx_contrib_ops": True,
    },
    "provider_options": {},
    "session_options": None,
}


def test_defaults_are_the_references():
    assert ORTTrainerOptions().to_dict() == EXPECTED_DEFAULTS
    assert ORTTrainerOptions({}).to_dict() == EXPECTED_DEFAULTS
    assert ORTTrainerOptions(None).to_dict() == EXPECTED_DEFAULTS


def test_read_by_attribute():
    scheduler = lr_scheduler.LinearWarmupLRScheduler(total_steps=1000, warmup=0.1)
    scaler = amp.DynamicLossScaler(loss_scale=float(1 << 16))
    session_options = SessionOptions()
    postprocess = lambda model: model  # noqa: E731
    opts = ORTTrainerOptions(
        {
            "batch": {"gradient_accumulation_steps": 128},
            "device": {"id": "cpu", "mem_limit": 2 * 1024 * 1024 * 1024},
            "lr_scheduler": scheduler,
            "mixed_precision": {"enabled": True, "loss_scaler": scaler},
            "utils": {"frozen_weights": ("embed.weight", "fc.bias")},
            "debug": {"graph_save_paths": {"model_with_training_graph_path": "train.onnx"}},
            "_internal_use": {"onnx_opset_version": 17, "extra_postprocess": postprocess},
            "provider_options": {"CPUExecutionProvider": {"arena": "off"}},
            "session_options": session_options,
            "graph_transformer": {"propagate_cast_ops_config": {"strategy": PropagateCastOpsStrategy.NONE}},
        }
    )
    assert opts.batch.gradient_accumulation_steps == 128
    assert (opts.device.id, opts.device.mem_limit) == ("cpu", 2 * 1024 * 1024 * 1024)
    assert opts.lr_scheduler is scheduler
    assert opts.mixed_precision.enabled is True and opts.mixed_precision.loss_scaler is scaler
    assert opts.utils.frozen_weights == ["embed.weight", "fc.bias"]
    assert opts.debug.graph_save_paths.model_with_training_graph_path == "train.onnx"
    assert opts.debug.graph_save_paths.model_with_gradient_graph_path == ""
    assert opts._internal_use.onnx_opset_version == 17
    assert opts._internal_use.extra_postprocess is postprocess
    assert opts.provider_options == {"CPUExecutionProvider": {"arena": "off"}}
    assert opts.session_options is session_options
    assert opts.graph_transformer.propagate_cast_ops_config.strategy is PropagateCastOpsStrategy.NONE
    # Untouched keys of a group that was given keep their defaults.
    assert opts.utils.grad_norm_clip is True
    assert ORTTrainerOptions(opts.to_dict()).to_dict() == opts.to_dict()


@pytest.mark.parametrize("opset", range(12, 22))
def test_every_supported_opset(opset):
    opts = ORTTrainerOptions({"_internal_use": {"onnx_opset_version": opset}})
    assert opts._internal_use.onnx_opset_version == opset


def nested(path, value):
    """{'a': {'b': value}} from 'a.b'."""
    for key in reversed(path.split(".")):
        value = {key: value}
    return value


# (option path, value, what the message must say was expected, where under the path the error is)
INVALID = [
    ("batch.gradient_accumulation_steps", 0, ">= 1", ""),
    ("batch.gradient_accumulation_steps", True, "an integer", ""),
    ("batch.gradient_accumulation_steps", 2.0, "an integer", ""),
    ("batch.gradient_accumulation_steps", "2", "an integer", ""),
    ("device.id", 0, "a string", ""),
    ("device.mem_limit", -1, ">= 0", ""),
    ("distributed.world_rank", -1, ">= 0", ""),
    ("distributed.world_size", 0, ">= 1", ""),
    ("distributed.local_rank", -1, ">= 0", ""),
    ("distributed.data_parallel_size", 0, ">= 1", ""),
    ("distributed.horizontal_parallel_size", 0, ">= 1", ""),
    ("distributed.pipeline_parallel.pipeline_parallel_size", 0, ">= 1", ""),
    ("distributed.pipeline_parallel.num_pipeline_micro_batches", 0, ">= 1", ""),
    ("distributed.pipeline_parallel.pipeline_cut_info_string", 3, "a string", ""),
    ("distributed.pipeline_parallel.sliced_schema", {"x": [1, "2"]}, "an integer", ".x[1]"),
    ("distributed.pipeline_parallel.sliced_axes", {"x": 0.5}, "an integer", ".x"),
    ("distributed.pipeline_parallel.sliced_tensor_names", [1], "a string", "[0]"),
    ("distributed.deepspeed_zero_optimization.stage", 2, "<= 1", ""),
    ("distributed.allreduce_post_accumulation", 1, "a bool", ""),
    ("distributed.enable_adasum", "yes", "a bool", ""),
    ("lr_scheduler", "linear", "an instance of _LRScheduler", ""),
    ("mixed_precision.enabled", 1, "a bool", ""),
    ("mixed_precision.loss_scaler", 1024.0, "an instance of LossScaler", ""),
    ("mixed_precision.dtype", "float32", "'float16' or 'bfloat16'", ""),
    ("graph_transformer.gelu_recompute", None, "a bool", ""),
    ("graph_transformer.number_recompute_layers", -1, ">= 0", ""),
    ("graph_transformer.propagate_cast_ops_config.strategy", 2, "an instance of PropagateCastOpsStrategy", ""),
    ("graph_transformer.propagate_cast_ops_config.level", -2, ">= -1", ""),
    ("graph_transformer.propagate_cast_ops_config.allow", "Add", "a list", ""),
    ("utils.frozen_weights", ["a", 3], "a string", "[1]"),
    ("utils.grad_norm_clip", "false", "a bool", ""),
    ("debug.graph_save_paths.model_with_gradient_graph_path", None, "a string", ""),
    ("debug.graph_save_paths", [], "a dict", ""),
    ("_internal_use.onnx_opset_version", 11, ">= 12", ""),
    ("_internal_use.onnx_opset_version", 22, "<= 21", ""),
    ("_internal_use.extra_postprocess", "fn", "a callable", ""),
    ("provider_options", {"CPUExecutionProvider": 1}, "a dict", ".CPUExecutionProvider"),
    ("session_options", {"intra_op_num_threads": 1}, "an instance of SessionOptions", ""),
    ("batch", 4, "a dict", ""),
]


@pytest.mark.parametrize("path, value, expected, under", INVALID, ids=[f"{c[0]}={c[1]!r}" for c in INVALID])
def test_invalid_values_name_the_key_and_the_expectation(path, value, expected, under):
    with pytest.raises(ValueError) as info:
        ORTTrainerOptions(nested(path, value))
    message = str(info.value)
    assert f"'{path}{under}'" in message and expected in message, message


@pytest.mark.parametrize(
    "options, path, allowed",
    [
        ({"batchs": {}}, "batchs", "'batch'"),
        ({"batch": {"gradient_accumulation": 2}}, "batch.gradient_accumulation", "'gradient_accumulation_steps'"),
        (
            {"debug": {"graph_save_paths": {"model_path": "m.onnx"}}},
            "debug.graph_save_paths.model_path",
            "'model_with_training_graph_path'",
        ),
        ({"internal_use": {}}, "internal_use", "'_internal_use'"),
        # The pipeline options sit in distributed.pipeline_parallel, as in the v1.9 code.
        (nested("distributed.pipeline_parallel_size", 2), "distributed.pipeline_parallel_size", "'pipeline_parallel'"),
    ],
)
def test_unknown_keys_are_refused_with_the_allowed_ones(options, path, allowed):
    with pytest.raises(ValueError, match="unknown option") as info:
        ORTTrainerOptions(options)
    assert f"'{path}'" in str(info.value) and allowed in str(info.value)


def test_docstring_spellings_of_cast_propagation_get_a_hint():
    for old, new in (("propagate_cast_ops_strategy", "strategy"), ("propagate_cast_ops_level", "level")):
        with pytest.raises(ValueError, match=f"did you mean '{new}'"):
            ORTTrainerOptions({"graph_transformer": {"propagate_cast_ops_config": {old: 1}}})


def test_every_error_is_reported_at_once():
    with pytest.raises(ValueError) as info:
        ORTTrainerOptions({"batch": {"gradient_accumulation_steps": 0}, "utils": {"grad_norm_clip": 0}})
    assert "batch.gradient_accumulation_steps" in str(info.value) and "utils.grad_norm_clip" in str(info.value)


@pytest.mark.parametrize("options", [[("batch", {})], "batch", 3])
def test_options_must_be_a_dict(options):
    with pytest.raises(ValueError, match="options must be a dict"):
        ORTTrainerOptions(options)


def test_assignments_are_validated():
    opts = ORTTrainerOptions()
    opts.mixed_precision.loss_scaler = amp.DynamicLossScaler()
    assert isinstance(opts.mixed_precision.loss_scaler, amp.DynamicLossScaler)
    opts.lr_scheduler = lr_scheduler.ConstantWarmupLRScheduler(total_steps=10)
    with pytest.raises(ValueError, match="'mixed_precision.loss_scaler'.*LossScaler"):
        opts.mixed_precision.loss_scaler = "dynamic"
    with pytest.raises(ValueError, match="'batch.gradient_accumulation_steps'.*>= 1"):
        opts.batch.gradient_accumulation_steps = 0
    with pytest.raises(ValueError, match="'debug.graph_save_paths.model_with_gradient_graph_path'"):
        opts.debug.graph_save_paths.model_with_gradient_graph_path = 1
    assert opts.batch.gradient_accumulation_steps == 1


def test_keyword_argument_copy_and_pickle():
    import copy
    import pickle

    opts = ORTTrainerOptions(options={"batch": {"gradient_accumulation_steps": 3}})
    for other in (copy.deepcopy(opts), pickle.loads(pickle.dumps(opts))):
        assert other.to_dict() == opts.to_dict()
        other.batch.gradient_accumulation_steps = 5
        assert opts.batch.gradient_accumulation_steps == 3


def test_defaults_are_not_shared_between_instances():
    first, second = ORTTrainerOptions(), ORTTrainerOptions()
    first.utils.frozen_weights.append("w")
    assert second.utils.frozen_weights == []


def test_device_default_follows_cuda_availability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert ORTTrainerOptions().device.id == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ORTTrainerOptions().device.id == "cpu"


# --- settings whose feature is not built yet -------------------------------------------------


def test_defaults_are_all_supported():
    assert ORTTrainerOptions().unsupported_settings() == []
    supported = ORTTrainerOptions(
        {
            "batch": {"gradient_accumulation_steps": 8},
            "device": {"id": "cpu"},
            "lr_scheduler": lr_scheduler.PolyWarmupLRScheduler(total_steps=100),
            "mixed_precision": {"loss_scaler": amp.DynamicLossScaler()},
            "utils": {"frozen_weights": ["w"], "grad_norm_clip": False},
            "debug": {"graph_save_paths": {"model_with_training_graph_path": "t.onnx"}},
            "_internal_use": {"onnx_opset_version": 12},
        }
    )
    assert supported.unsupported_settings() == []


# Data parallelism (world_size, world_rank, data_parallel_size, allreduce_post_accumulation) and
# ZeRO stage 1 are built (trainer/distributed.py, trainer/zero.py; test_orttrainer_distributed.py,
# test_orttrainer_zero.py); these are not.
UNBUILT = [
    ("distributed.horizontal_parallel_size", 4, "horizontal (tensor) parallelism"),
    ("distributed.pipeline_parallel.pipeline_parallel_size", 2, "issue 13"),
    ("distributed.pipeline_parallel.sliced_tensor_names", ["x"], "issue 13"),
    ("distributed.enable_adasum", True, "Adasum"),
    ("utils.memory_efficient_gradient", True, "issue 14 (memory optimizer)"),
    ("device.mem_limit", 1 << 30, "memory limit"),
]


@pytest.mark.parametrize("path, value, planned", UNBUILT, ids=[c[0] for c in UNBUILT])
def test_each_unbuilt_feature_is_reported(path, value, planned):
    messages = ORTTrainerOptions(nested(path, value)).unsupported_settings()
    assert len(messages) == 1, messages
    assert messages[0].startswith(f"{path}={value!r}") and planned in messages[0], messages[0]


def test_all_unbuilt_settings_are_reported_together():
    opts = ORTTrainerOptions(
        {"distributed": {"world_size": 2, "enable_adasum": True, "horizontal_parallel_size": 2},
         "utils": {"memory_efficient_gradient": True}}
    )
    assert [m.split(" ")[0] for m in opts.unsupported_settings()] == [
        "distributed.horizontal_parallel_size=2",
        "distributed.enable_adasum=True",
        "utils.memory_efficient_gradient=True",
    ]


def test_the_table_names_existing_options():
    opts = ORTTrainerOptions()
    for path, _ in unsupported_options.NOT_BUILT_YET:
        unsupported_options._lookup(opts, path)  # raises AttributeError on a stale path


@pytest.mark.parametrize(
    "device_id, cuda_devices, engine_cuda, problem",
    [
        ("cpu", 0, False, None),
        ("cuda", 0, True, "torch sees no CUDA device"),
        ("cuda:1", 1, True, "torch sees 1 (cuda:0..cuda:0)"),
        ("cuda:1", 2, True, None),
        ("cuda", 2, False, "no CUDA provider"),
        ("gpu0", 2, True, "expected 'cpu', 'cuda' or 'cuda:N'"),
        ("CPU", 0, True, "expected 'cpu', 'cuda' or 'cuda:N'"),
    ],
)
def test_device_id_must_name_an_available_device(monkeypatch, device_id, cuda_devices, engine_cuda, problem):
    from torch_ort_backend._engine import C

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_devices > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda_devices)
    monkeypatch.setattr(C, "built_with_cuda", engine_cuda, raising=False)
    messages = ORTTrainerOptions({"device": {"id": device_id}}).unsupported_settings()
    if problem is None:
        assert messages == []
    else:
        assert len(messages) == 1 and messages[0].startswith(f"device.id={device_id!r}")
        assert problem in messages[0], messages[0]


# --- package surface ---------------------------------------------------------------------------


def test_package_exports():
    assert torch_ort_backend.ORTTrainerOptions is ORTTrainerOptions
    assert torch_ort_backend.optim is optim and torch_ort_backend.amp is amp
    assert optim.SGDConfig is SGDConfig and optim.lr_scheduler.LinearWarmupLRScheduler is not None
    for name in ("ORTTrainerOptions", "amp", "optim"):
        assert name in torch_ort_backend.__all__


def test_import_does_not_load_the_validation_library():
    code = "import sys, torch_ort_backend; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- TrainStepInfo -------------------------------------------------------------------------------


def test_train_step_info_defaults_and_fields():
    config = AdamConfig(lr=0.01)
    info = TrainStepInfo(config)
    assert (info.optimizer_config, info.all_finite, info.fetches, info.optimization_step, info.step) == (
        config, True, [], 0, 0
    )
    assert TrainStepInfo(config).fetches is not info.fetches
    info = TrainStepInfo(config, all_finite=False, fetches=["loss"], optimization_step=3, step=12)
    assert (info.all_finite, info.fetches, info.optimization_step, info.step) == (False, ["loss"], 3, 12)


@pytest.mark.parametrize(
    "kwargs, culprit",
    [
        ({"optimizer_config": {"lr": 0.1}}, "optimizer_config"),
        ({"all_finite": 1}, "all_finite"),
        ({"fetches": "loss"}, "fetches"),
        ({"fetches": [0]}, "fetches"),
        ({"optimization_step": -1}, "optimization_step"),
        ({"optimization_step": 1.0}, "optimization_step"),
        ({"step": -1}, "step"),
        ({"step": math.inf}, "step"),
    ],
)
def test_train_step_info_bad_arguments(kwargs, culprit):
    kwargs = {"optimizer_config": SGDConfig(), **kwargs}
    with pytest.raises(ValueError, match=culprit):
        TrainStepInfo(**kwargs)
