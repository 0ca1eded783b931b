"""ORTTrainerOptions: every ORTTrainer setting, validated once, read by attribute.

The schema is onnxruntime-training 1.9's (``onnxruntime.training.ORTTrainerOptions``): the same
groups, keys, types, ranges and defaults. It is declared here as pydantic models, one per group,
in strict mode (no silent conversion: ``True`` is not an integer, ``"1"`` is not a number) with
unknown keys refused; assignments after construction are validated too. Differences from the
reference:

- ``_internal_use.onnx_opset_version`` accepts 12 through 21 (default 14); the reference
  accepted 12 through 14.
- ``device.id`` defaults to ``'cuda'`` when ``torch.cuda.is_available()`` and ``'cpu'`` otherwise
  (the reference always defaulted to ``'cuda'``).
- ``session_options`` takes this package's :class:`torch_ort_backend.SessionOptions`.
- ``graph_transformer.propagate_cast_ops_config`` takes ``strategy`` / ``level`` / ``allow``, as
  the reference's code did (its docstring's schema spelled them ``propagate_cast_ops_*``; those
  spellings are refused with a hint).
- Errors are ``ValueError`` naming every offending key path and what was expected.

Settings whose feature is not built yet are validated but listed by
:meth:`ORTTrainerOptions.unsupported_settings` (see trainer/unsupported_options.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import Annotated, Any, ClassVar, Literal

import torch
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from ..amp.loss_scaler import LossScaler
from ..optim.lr_scheduler import _LRScheduler
from ..session import SessionOptions

MIN_OPSET = 12
MAX_OPSET = 21
DEFAULT_OPSET = 14


class PropagateCastOpsStrategy(IntEnum):
    """How cast propagation moves Cast nodes to widen float16 regions (onnxruntime's values)."""

    NONE = 0
    INSERT_AND_REDUCE = 1
    FLOOD_FILL = 2


def _tuple_as_list(value: Any) -> Any:
    # The reference's 'list' type accepted any sequence; a tuple of names is as good as a list.
    return list(value) if isinstance(value, tuple) else value


_Names = Annotated[list[str], BeforeValidator(_tuple_as_list)]


def _default_device_id() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


class _Section(BaseModel):
    """One group of options: strict types, no unknown keys, validated assignment."""

    model_config = ConfigDict(strict=True, extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    # The group's key path inside ORTTrainerOptions, for error messages on assignment.
    _path: ClassVar[str] = ""

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as err:
            raise ValueError(_describe_errors(err, type(self), self._path)) from None


class Batch(_Section):
    _path: ClassVar[str] = "batch"
    gradient_accumulation_steps: int = Field(1, ge=1)


class Device(_Section):
    _path: ClassVar[str] = "device"
    id: str = Field(default_factory=_default_device_id)
    mem_limit: int = Field(0, ge=0)


class PipelineParallel(_Section):
    _path: ClassVar[str] = "distributed.pipeline_parallel"
    pipeline_parallel_size: int = Field(1, ge=1)
    num_pipeline_micro_batches: int = Field(1, ge=1)
    pipeline_cut_info_string: str = ""
    sliced_schema: dict[str, list[int]] = Field(default_factory=dict)
    sliced_axes: dict[str, int] = Field(default_factory=dict)
    sliced_tensor_names: _Names = Field(default_factory=list)


class DeepSpeedZeroOptimization(_Section):
    _path: ClassVar[str] = "distributed.deepspeed_zero_optimization"
    stage: int = Field(0, ge=0, le=1)


class Distributed(_Section):
    _path: ClassVar[str] = "distributed"
    world_rank: int = Field(0, ge=0)
    world_size: int = Field(1, ge=1)
    local_rank: int = Field(0, ge=0)
    data_parallel_size: int = Field(1, ge=1)
    horizontal_parallel_size: int = Field(1, ge=1)
    pipeline_parallel: PipelineParallel = Field(default_factory=PipelineParallel)
    allreduce_post_accumulation: bool = False
    deepspeed_zero_optimization: DeepSpeedZeroOptimization = Field(default_factory=DeepSpeedZeroOptimization)
    enable_adasum: bool = False


class MixedPrecision(_Section):
    _path: ClassVar[str] = "mixed_precision"
    enabled: bool = False
    loss_scaler: LossScaler | None = None
    # Not in the reference (float16 only): the type the forward and backward compute in.
    dtype: Literal["float16", "bfloat16"] = "float16"


class PropagateCastOpsConfig(_Section):
    _path: ClassVar[str] = "graph_transformer.propagate_cast_ops_config"
    strategy: PropagateCastOpsStrategy | None = PropagateCastOpsStrategy.FLOOD_FILL
    level: int = Field(1, ge=-1)
    allow: _Names = Field(default_factory=list)


class GraphTransformer(_Section):
    _path: ClassVar[str] = "graph_transformer"
    attn_dropout_recompute: bool = False
    gelu_recompute: bool = False
    transformer_layer_recompute: bool = False
    number_recompute_layers: int = Field(0, ge=0)
    allow_layer_norm_mod_precision: bool = False
    propagate_cast_ops_config: PropagateCastOpsConfig = Field(default_factory=PropagateCastOpsConfig)


class Utils(_Section):
    _path: ClassVar[str] = "utils"
    frozen_weights: _Names = Field(default_factory=list)
    grad_norm_clip: bool = True
    memory_efficient_gradient: bool = False
    run_symbolic_shape_infer: bool = False


class GraphSavePaths(_Section):
    _path: ClassVar[str] = "debug.graph_save_paths"
    model_after_graph_transforms_path: str = ""
    model_with_gradient_graph_path: str = ""
    model_with_training_graph_path: str = ""
    model_with_training_graph_after_optimization_path: str = ""


class Debug(_Section):
    _path: ClassVar[str] = "debug"
    deterministic_compute: bool = False
    check_model_export: bool = False
    graph_save_paths: GraphSavePaths = Field(default_factory=GraphSavePaths)


class InternalUse(_Section):
    _path: ClassVar[str] = "_internal_use"
    enable_internal_postprocess: bool = True
    extra_postprocess: Callable[..., Any] | None = None
    onnx_opset_version: int = Field(DEFAULT_OPSET, ge=MIN_OPSET, le=MAX_OPSET)
    enable_onnx_contrib_ops: bool = True


class ORTTrainerOptions(_Section):
    """Settings of ORTTrainer, grouped as in onnxruntime-training 1.9.

    Args:
        options: a dict of groups (any group or key left out takes its default), e.g.
            ``{'batch': {'gradient_accumulation_steps': 4}, 'utils': {'frozen_weights': ['fc.bias']}}``.

    Read by attribute: ``opts.batch.gradient_accumulation_steps``,
    ``opts.debug.graph_save_paths.model_with_training_graph_path``, ``opts._internal_use.onnx_opset_version``.

    Groups and keys (default in brackets):

    - batch: gradient_accumulation_steps [1, >= 1]
    - device: id ['cuda' if torch sees a GPU, else 'cpu'], mem_limit [0 bytes: no limit, >= 0]
    - distributed: world_rank [0], world_size [1], local_rank [0], data_parallel_size [1],
      horizontal_parallel_size [1], pipeline_parallel {pipeline_parallel_size [1],
      num_pipeline_micro_batches [1], pipeline_cut_info_string [''], sliced_schema [{}: name ->
      list of int], sliced_axes [{}: name -> int], sliced_tensor_names [[]]},
      allreduce_post_accumulation [False], deepspeed_zero_optimization {stage [0, 0..1]},
      enable_adasum [False]
    - lr_scheduler: an ``optim.lr_scheduler`` scheduler [None: constant lr]
    - mixed_precision: enabled [False], loss_scaler [None: a DynamicLossScaler when enabled],
      dtype ['float16' or 'bfloat16'; not in the reference]
    - graph_transformer: attn_dropout_recompute, gelu_recompute, transformer_layer_recompute
      [False], number_recompute_layers [0], allow_layer_norm_mod_precision [False],
      propagate_cast_ops_config {strategy [PropagateCastOpsStrategy.FLOOD_FILL], level [1, >= -1],
      allow [[]]}
    - utils: frozen_weights [[]: parameter names never updated], grad_norm_clip [True: clip the
      global gradient norm to 1.0 for Adam and Lamb], memory_efficient_gradient [False],
      run_symbolic_shape_infer [False]
    - debug: deterministic_compute [False], check_model_export [False], graph_save_paths
      {model_after_graph_transforms_path, model_with_gradient_graph_path,
      model_with_training_graph_path, model_with_training_graph_after_optimization_path ['': not
      saved]}
    - _internal_use: enable_internal_postprocess [True], extra_postprocess [None: a callable
      ModelProto -> ModelProto], onnx_opset_version [14, 12..21], enable_onnx_contrib_ops [True]
    - provider_options: {provider name: {key: value}} [{}]
    - session_options: a torch_ort_backend.SessionOptions [None]

    Differences from the reference: see the module docstring (opset range 12..21 with default
    14, device.id default by availability, our SessionOptions, ValueError messages with key paths).

    Raises:
        ValueError: an unknown key, a value of the wrong type or out of range, naming each key
            path and what was expected.
    """

    _path: ClassVar[str] = ""
    batch: Batch = Field(default_factory=Batch)
    device: Device = Field(default_factory=Device)
    distributed: Distributed = Field(default_factory=Distributed)
    lr_scheduler: _LRScheduler | None = None
    mixed_precision: MixedPrecision = Field(default_factory=MixedPrecision)
    graph_transformer: GraphTransformer = Field(default_factory=GraphTransformer)
    utils: Utils = Field(default_factory=Utils)
    debug: Debug = Field(default_factory=Debug)
    # A leading underscore makes a private attribute in pydantic: the field has another name
    # and the reference's key as its alias; the property below gives the reference's attribute.
    internal_use: InternalUse = Field(default_factory=InternalUse, alias="_internal_use")
    provider_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    session_options: SessionOptions | None = None

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise ValueError(f"ORTTrainerOptions: options must be a dict, got {type(options).__name__}")
        bad_keys = [key for key in options if not isinstance(key, str)]
        if bad_keys:
            raise ValueError(f"ORTTrainerOptions: option names must be strings, got {bad_keys!r}")
        try:
            super().__init__(**options)
        except ValidationError as err:
            raise ValueError(_describe_errors(err, ORTTrainerOptions, "")) from None

    @property
    def _internal_use(self) -> InternalUse:
        return self.internal_use

    def to_dict(self) -> dict[str, Any]:
        """The options as the nested dict the constructor takes (defaults included)."""
        return self.model_dump(by_alias=True)

    def unsupported_settings(self) -> list[str]:
        """One message per setting whose feature is not built yet (or whose device is missing).

        ORTTrainer raises NotImplementedError with these; the list of such features lives in
        trainer/unsupported_options.py.
        """
        from .unsupported_options import unsupported_settings

        return unsupported_settings(self)


# Spellings from the reference's docstring schema that its code never accepted.
_HINTS = {
    "propagate_cast_ops_strategy": "strategy",
    "propagate_cast_ops_level": "level",
    "propagate_cast_ops_allow": "allow",
}

_EXPECTED = {
    "int_type": "expected an integer",
    "bool_type": "expected a bool",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a dict",
    "model_type": "expected a dict",
    "callable_type": "expected a callable or None",
}


def _section_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class reached by following `loc` (field names or aliases) from `root`."""
    cls: Any = root
    for part in loc:
        fields = {field.alias or name: field for name, field in cls.model_fields.items()}
        field = fields.get(part)
        annotation = None if field is None else field.annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        cls = annotation
    return cls


def _format_path(prefix: str, loc: tuple[Any, ...]) -> str:
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _describe_error(error: Any, root: type[BaseModel], prefix: str) -> str:
    loc = tuple(error["loc"])
    path = _format_path(prefix, loc)
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        section = _section_at(root, loc[:-1])
        allowed = [] if section is None else [f.alias or n for n, f in section.model_fields.items()]
        hint = _HINTS.get(str(loc[-1]))
        hint_text = f" (did you mean '{hint}'?)" if hint in allowed else ""
        return f"unknown option '{path}'{hint_text}; expected one of {allowed}"
    if kind == "greater_than_equal":
        expected = f"expected a value >= {ctx['ge']}"
    elif kind == "less_than_equal":
        expected = f"expected a value <= {ctx['le']}"
    elif kind == "is_instance_of":
        expected = f"expected an instance of {ctx['class']} or None"
    else:
        expected = _EXPECTED.get(kind, error["msg"])
    return f"'{path}' = {error['input']!r}: {expected}"


def _describe_errors(err: ValidationError, root: type[BaseModel], prefix: str) -> str:
    lines = [_describe_error(error, root, prefix) for error in err.errors()]
    return "invalid ORTTrainerOptions: " + "; ".join(lines)
