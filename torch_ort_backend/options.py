"""Every option of the "ort" backend, each with its ORTMODULE_* environment variable, parsed and
validated here and nowhere else.

Sources, later winning: the defaults, ``torch.compile(..., options={...})`` (or ORTModule's
DebugOptions), then the environment, as onnxruntime-training did (an ORTMODULE_* variable overrides
what the code says, so a run can be re-configured without editing it).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from .fallback import DEFAULT_POLICY, FallbackPolicy, parse_policy

MIN_OPSET, MAX_OPSET, DEFAULT_OPSET = 12, 21, 18
LOG_LEVELS = ("VERBOSE", "INFO", "WARNING", "ERROR", "FATAL")


@dataclasses.dataclass
class BackendOptions:
    opset: int = DEFAULT_OPSET
    fallback_policy: FallbackPolicy = DEFAULT_POLICY
    fallback_retry: bool = False
    log_level: str = "WARNING"
    save_onnx: bool = False
    onnx_prefix: str = ""
    save_path: str = ""
    intra_op_threads: int = 0  # 0: torch's intra-op pool at torch's current thread count
    optimization_level: int = 99  # GraphOptimizationLevel: 0 disable, 1 basic, 2 extended, 99 all
    enable_profiling: bool = False
    # ATen ops run by torch's kernel (an ATen node) for every node, although the engine has a native
    # one; () runs every converter's native form. None (default): the converters choose per shape
    # where torch's CPU kernel is measured faster (convolution_backward: ops_training._torch_conv_grad_wins).
    prefer_torch_kernels: tuple | None = None
    # torch.autograd.Function as PythonOp (docs/python_op.md)
    disable_custom_autograd_support: bool = False
    skipped_autograd_functions: frozenset = frozenset()  # qualified names traced through instead
    allow_autograd_checkpoint: bool = False
    # the memory optimizer (docs/memory_optimizer.md): 0 only the configured plans, 1 + transformer
    # layers but the last, 2 + every layer and op cluster; plans as PlanConfig tuples
    memory_opt_level: int = 0
    memory_opt_config: tuple = ()
    # scaled-dot-product attention as one ATen node run by torch's fused kernel (False: decomposed)
    aten_sdpa_fallback: bool = True
    # eager attention (matmul / softmax / matmul) fused into scaled-dot-product attention on dynamo's
    # graph (attention_fusion.py); off in onnxruntime-training, on here: the fused kernel is exact to rounding
    use_efficient_attention: bool = True
    # calls skip AOTAutograd's runtime wrappers where its metadata shows nothing for them to do
    # (lean_call.py; ORTMODULE_LEAN_CALL=0 keeps them for every call)
    lean_call: bool = True
    deepcopy_before_model_export: bool = True  # holds either way: dynamo never runs the module for export
    cache_dir: str = ""  # exported graphs cached on disk (model_cache.py); "" off
    print_input_density: bool = False  # runtime_inspector.py
    print_memory_stats: bool = False
    # the padding-aware compute optimizer (compute_optimizer/), with onnxruntime-training's defaults:
    # the label case (on) needs the first three switches, the embedding case (off) the first two and
    # its own
    enable_compute_optimizer: bool = True
    enable_sparse_optimizer: bool = True
    enable_label_sparse_optimizer: bool = True
    enable_embedding_sparse_optimizer: bool = False
    # onnxruntime-training switches that are refused when they ask for what this engine cannot do
    # (REFUSED below says why); the fields hold the accepted value.
    enable_mem_efficient_grad_mgmt: bool = False
    enable_tuning: bool = False
    max_tuning_duration_ms: int = 0
    tuning_results_path: str = ""


# option name -> (environment variable or None, parser)
def _int_in(lo: int, hi: int):
    def parse(name: str, v: Any) -> int:
        try:
            i = int(v)
            if isinstance(v, bool) or (isinstance(v, float) and v != i):
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}") from None
        if not lo <= i <= hi:
            raise ValueError(f"{name} must be in [{lo}, {hi}], got {i}")
        return i

    return parse


def _bool(name: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name} must be a boolean (1/0, true/false), got {v!r}")


def _str(name: str, v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{name} must be a string, got {type(v).__name__}")
    return v


def _directory(name: str, v: Any) -> str:
    if not isinstance(v, (str, os.PathLike)):
        raise ValueError(f"{name} must be a directory path (str), got {type(v).__name__}")
    path = os.fspath(v)
    if path and os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{name} must be a directory, but {path!r} is a file")
    return path


def _log_level(name: str, v: Any) -> str:
    s = getattr(v, "name", v)
    if not isinstance(s, str) or s.upper() not in LOG_LEVELS:
        raise ValueError(f"{name} must be one of {', '.join(LOG_LEVELS)}, got {v!r}")
    return s.upper()


def _names(name: str, v: Any) -> frozenset:
    """Qualified names (module.QualName): a comma-separated string, or a list / tuple / set of them."""
    if isinstance(v, str):
        items = v.split(",")
    elif isinstance(v, (list, tuple, set, frozenset)):
        items = list(v)
    else:
        raise ValueError(f"{name} must be comma-separated qualified names or a list of them, got {type(v).__name__}")
    names = set()
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{name}: expected qualified names (str), got {item!r}")
        item = item.strip()
        if item:
            names.add(item)
    return frozenset(names)


def _policy(name: str, v: Any) -> FallbackPolicy:
    return parse_policy(v, name)


def _op_names(name: str, v: Any) -> tuple | None:
    """ATen op names (no overload): a list/tuple, or a comma-separated string; None for the default."""
    if v is None:
        return None
    items = v.split(",") if isinstance(v, str) else v
    if not isinstance(items, (list, tuple, set, frozenset)) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"{name} must be a list of ATen op names such as ['convolution_backward'], got {v!r}")
    names = tuple(i.strip().removeprefix("aten.") for i in items if i.strip())
    import torch

    unknown = [n for n in names if not hasattr(torch.ops.aten, n)]
    if unknown:
        raise ValueError(f"{name}: {', '.join(unknown)} is not an ATen op")
    return names


def _opt_level(name: str, v: Any) -> int:
    i = int(getattr(v, "value", v)) if not isinstance(v, str) else None
    if i not in (0, 1, 2, 99):
        raise ValueError(f"{name} must be 0 (disable), 1 (basic), 2 (extended) or 99 (all), got {v!r}")
    return i


def _refused(parse, accepted: Any, reason: str):
    """An onnxruntime-training switch this engine cannot honour: the value that asks for nothing
    (``accepted``) parses; any other is a ValueError saying why it does not apply here."""

    def check(name: str, v: Any) -> Any:
        value = parse(name, v)
        if value != accepted:
            raise ValueError(f"{name}={v!r} cannot be honoured: {reason} (docs/ortmodule.md)")
        return value

    return check


REFUSED = {
    "enable_mem_efficient_grad_mgmt": (
        "AOTAutograd's backward graph returns all parameter gradients to autograd together when it ends; "
        "there is no per-parameter hook inside the engine's run to hand one over earlier"),
    "enable_tuning": "the CPU engine has one kernel per operator and shape class, so there is nothing to tune",
    "max_tuning_duration_ms": "it bounds online op tuning, which this engine does not do (ORTMODULE_ENABLE_TUNING)",
    "tuning_results_path": "there are no op tuning results to save or load (ORTMODULE_ENABLE_TUNING)",
}


def _memory_plans(name: str, v: Any) -> tuple:
    from .memory_optimizer.plans import parse_config

    return parse_config(name, v)


SPEC: dict[str, tuple[str | None, Any]] = {
    "opset": ("ORTMODULE_ONNX_OPSET_VERSION", _int_in(MIN_OPSET, MAX_OPSET)),
    "fallback_policy": ("ORTMODULE_FALLBACK_POLICY", _policy),
    "fallback_retry": ("ORTMODULE_FALLBACK_RETRY", _bool),
    "log_level": ("ORTMODULE_LOG_LEVEL", _log_level),
    "save_onnx": (None, _bool),
    "onnx_prefix": (None, _str),
    "save_path": ("ORTMODULE_SAVE_ONNX_PATH", _directory),
    "intra_op_threads": (None, _int_in(0, 1024)),
    "optimization_level": (None, _opt_level),
    "enable_profiling": (None, _bool),
    "prefer_torch_kernels": (None, _op_names),
    "disable_custom_autograd_support": ("ORTMODULE_DISABLE_CUSTOM_AUTOGRAD_SUPPORT", _bool),
    "skipped_autograd_functions": ("ORTMODULE_SKIPPED_AUTOGRAD_FUNCTIONS", _names),
    "allow_autograd_checkpoint": ("ORTMODULE_ALLOW_AUTOGRAD_CHECKPOINT", _bool),
    "memory_opt_level": ("ORTMODULE_MEMORY_OPT_LEVEL", _int_in(0, 2)),
    "memory_opt_config": ("ORTMODULE_MEMORY_OPT_CONFIG", _memory_plans),
    "aten_sdpa_fallback": ("ORTMODULE_ATEN_SDPA_FALLBACK", _bool),
    "deepcopy_before_model_export": ("ORTMODULE_DEEPCOPY_BEFORE_MODEL_EXPORT", _bool),
    "cache_dir": ("ORTMODULE_CACHE_DIR", _directory),
    "print_input_density": ("ORTMODULE_PRINT_INPUT_DENSITY", _bool),
    "print_memory_stats": ("ORTMODULE_PRINT_MEMORY_STATS", _bool),
    "enable_compute_optimizer": ("ORTMODULE_ENABLE_COMPUTE_OPTIMIZER", _bool),
    "enable_sparse_optimizer": ("ORTMODULE_ENABLE_SPARSE_OPTIMIZER", _bool),
    "enable_label_sparse_optimizer": ("ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER", _bool),
    "enable_embedding_sparse_optimizer": ("ORTMODULE_ENABLE_EMBEDDING_SPARSE_OPTIMIZER", _bool),
    "use_efficient_attention": ("ORTMODULE_USE_EFFICIENT_ATTENTION", _bool),
    "lean_call": ("ORTMODULE_LEAN_CALL", _bool),
    "enable_mem_efficient_grad_mgmt": ("ORTMODULE_ENABLE_MEM_EFFICIENT_GRAD_MGMT", _bool),
    "enable_tuning": ("ORTMODULE_ENABLE_TUNING", _bool),
    "max_tuning_duration_ms": ("ORTMODULE_MAX_TUNING_DURATION_MS", _int_in(0, 2**31 - 1)),
    "tuning_results_path": ("ORTMODULE_TUNING_RESULTS_PATH", _str),
}
for _key, _reason in REFUSED.items():
    _env, _parse = SPEC[_key]
    SPEC[_key] = (_env, _refused(_parse, BackendOptions.__dataclass_fields__[_key].default, _reason))


def resolve(options: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> BackendOptions:
    """Defaults <- options <- environment. Unknown option names and invalid values raise ValueError
    naming the option (or variable) and what it accepts."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    if options:
        if not isinstance(options, Mapping):
            raise ValueError(f"options must be a dict, got {type(options).__name__}")
        for key, v in options.items():
            if key not in SPEC:
                raise ValueError(f"unknown option '{key}' for backend 'ort'; known options: {', '.join(SPEC)}")
            values[key] = SPEC[key][1](f"option '{key}'", v)
    for key, (env, parse) in SPEC.items():
        if env and env in environ:
            values[key] = parse(env, environ[env])
    opts = BackendOptions(**values)
    if opts.save_onnx and not opts.onnx_prefix:
        raise ValueError("option 'save_onnx' needs 'onnx_prefix' (the file name prefix of the saved models)")
    return opts
