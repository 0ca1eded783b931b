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
    # ATen ops run by torch's kernel (an ATen node) even though the engine has a native one, because
    # torch's is measured faster on CPU (docs/performance.md): convolution_backward goes through
    # oneDNN in torch and is ~4x the engine's im2col ConvGrad on the CNN benchmark's shapes.
    prefer_torch_kernels: tuple = ("convolution_backward",)
    # torch.autograd.Function as PythonOp (docs/python_op.md)
    disable_custom_autograd_support: bool = False
    skipped_autograd_functions: frozenset = frozenset()  # qualified names traced through instead
    allow_autograd_checkpoint: bool = False


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


def _op_names(name: str, v: Any) -> tuple:
    """ATen op names (no overload): a list/tuple, or a comma-separated string."""
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
}


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
