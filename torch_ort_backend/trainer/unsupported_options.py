"""The one list of ORTTrainerOptions settings whose feature is not built yet.

Such settings are validated like every other option, but until their feature lands ORTTrainer
refuses them (NotImplementedError with these messages) instead of silently ignoring them.
When a feature lands, delete its rows here.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import torch
from pydantic import BaseModel

if TYPE_CHECKING:
    from .options import ORTTrainerOptions

_SCALE_OUT = "issue 13 (scale-out)"
_MEMORY_OPTIMIZER = "issue 14 (memory optimizer)"

# (key path, where the feature is planned). A path names one option or a whole group: any option
# under it whose value differs from its default is reported.
NOT_BUILT_YET: tuple[tuple[str, str], ...] = (
    # Data parallelism (world_size, world_rank, local_rank, data_parallel_size,
    # allreduce_post_accumulation) and ZeRO stage 1 are built: trainer/distributed.py, trainer/zero.py.
    # These are not:
    ("distributed.horizontal_parallel_size", "Megatron-style horizontal (tensor) parallelism (no issue yet)"),
    ("distributed.pipeline_parallel", f"{_SCALE_OUT}: pipelines run through DeepSpeed (docs/distributed.md)"),
    ("distributed.enable_adasum", "Adasum gradient combination (no issue yet)"),
    ("utils.memory_efficient_gradient", _MEMORY_OPTIMIZER),
    ("device.mem_limit", "a per-device memory limit in the engine (no issue yet)"),
    # Settings that cannot apply to this engine: the reason is the message.
    ("_internal_use.enable_onnx_contrib_ops",
     "contrib ops: the training graph is made of com.microsoft gradient and optimizer ops, which cannot be turned off"),
    ("_internal_use.enable_internal_postprocess",
     "an internal postprocess step, which this exporter does not have (it writes the final graph directly)"),
    ("provider_options", "configurable execution providers; the CPU and CUDA providers take no options"),
)


def _lookup(options: Any, path: str) -> Any:
    value = options
    for part in path.split("."):
        value = getattr(value, "internal_use" if part == "_internal_use" else part)
    return value


def _differences(path: str, value: Any, default: Any) -> list[tuple[str, Any]]:
    """(path, value) of every option under `path` whose value is not its default."""
    if isinstance(value, BaseModel):
        found = []
        for name, field in type(value).model_fields.items():
            key = field.alias or name
            found += _differences(f"{path}.{key}", getattr(value, name), getattr(default, name))
        return found
    return [] if value == default else [(path, value)]


def _device_problem(device_id: str) -> str | None:
    """Why `device_id` cannot be used here, or None when it can."""
    if device_id == "cpu":
        return None
    match = re.fullmatch(r"cuda(?::(\d+))?", device_id)
    if match is None:
        return f"device.id={device_id!r}: expected 'cpu', 'cuda' or 'cuda:N'"
    from .._engine import C

    if not C.built_with_cuda:
        return f"device.id={device_id!r}: this build of the engine has no CUDA provider; use 'cpu'"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(match.group(1) or 0)
    if index >= count:
        seen = "torch sees no CUDA device" if count == 0 else f"torch sees {count} (cuda:0..cuda:{count - 1})"
        return f"device.id={device_id!r}: no such CUDA device ({seen}); expected 'cpu' or an available CUDA device"
    return None


def unsupported_settings(options: ORTTrainerOptions) -> list[str]:
    """One message per setting that ORTTrainer cannot honour yet, in NOT_BUILT_YET's order."""
    defaults = type(options)()
    messages = []
    for path, planned in NOT_BUILT_YET:
        for key, value in _differences(path, _lookup(options, path), _lookup(defaults, path)):
            messages.append(f"{key}={value!r} is not supported yet: it needs {planned}")
    problem = _device_problem(options.device.id)
    if problem is not None:
        messages.append(problem)
    return messages
