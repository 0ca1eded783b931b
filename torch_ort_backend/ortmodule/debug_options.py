"""DebugOptions and LogLevel: onnxruntime-training's names and arguments, validated when built.

A DebugOptions turns into options of the "ort" backend (torch_ort_backend.options.SPEC); the
ORTMODULE_LOG_LEVEL and ORTMODULE_SAVE_ONNX_PATH variables still override it there, as they did in
onnxruntime-training.
"""

from __future__ import annotations

import enum
import os
from typing import Any

from ..options import SPEC


class LogLevel(enum.IntEnum):
    """How much the backend logs on the "torch_ort_backend" logger, least detail last:

    - VERBOSE: also the engine's applied passes, partition and execution plan, the memory of each
      run, and the per-node profile summary (torch_ort_backend.end_profiling).
    - INFO: the partition report of each compiled graph, saved files, fallbacks.
    - WARNING (default): fallbacks to eager and other things a user should act on.
    - ERROR, FATAL: failures only.
    """

    VERBOSE = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    FATAL = 4


class _SaveOnnxView:
    """onnxruntime-training's DebugOptions.save_onnx_models: .save, .name_prefix and .path."""

    def __init__(self, options: "DebugOptions") -> None:
        self._options = options

    @property
    def save(self) -> bool:
        return self._options.save_onnx

    @property
    def name_prefix(self) -> str:
        return self._options.onnx_prefix

    @property
    def path(self) -> str:
        """Where the models go: ORTMODULE_SAVE_ONNX_PATH, else save_path, else the working directory."""
        env = SPEC["save_path"][0]
        return os.environ.get(env) or self._options.save_path or os.getcwd()


class _LoggingView:
    """onnxruntime-training's DebugOptions.logging: .log_level."""

    def __init__(self, options: "DebugOptions") -> None:
        self._options = options

    @property
    def log_level(self) -> LogLevel:
        return self._options.log_level


class DebugOptions:
    """What ORTModule logs and saves.

    Args:
        log_level: a LogLevel (ORTMODULE_LOG_LEVEL overrides it).
        save_onnx: save, for every compiled graph, the exported ONNX model and the engine's
            optimised one: ``<onnx_prefix>_<stage>_<n>_exported.onnx`` and ``..._optimized.onnx``
            (stage: forward, backward or inference; n: the graph's number).
        onnx_prefix: the file-name prefix; required when save_onnx is True.
        save_path: the directory for the saved models (ORTMODULE_SAVE_ONNX_PATH overrides it;
            default: the working directory). Created when missing.

    A wrong type or value raises ValueError naming the argument and what it accepts.
    """

    def __init__(self, log_level: LogLevel = LogLevel.WARNING, save_onnx: bool = False, onnx_prefix: str = "",
                 save_path: str = "") -> None:
        if not isinstance(log_level, LogLevel):
            allowed = ", ".join(f"LogLevel.{m.name}" for m in LogLevel)
            raise ValueError(f"DebugOptions: log_level must be one of {allowed}, got {log_level!r}")
        if not isinstance(save_onnx, bool):
            raise ValueError(f"DebugOptions: save_onnx must be a bool, got {save_onnx!r}")
        if not isinstance(onnx_prefix, str):
            raise ValueError(f"DebugOptions: onnx_prefix must be a str (a file-name prefix), got {onnx_prefix!r}")
        if os.sep in onnx_prefix or (os.altsep and os.altsep in onnx_prefix):
            raise ValueError(f"DebugOptions: onnx_prefix is a file-name prefix, not a path; got {onnx_prefix!r} "
                             f"(put the directory in save_path)")
        if save_onnx and not onnx_prefix:
            raise ValueError("DebugOptions: save_onnx=True needs onnx_prefix, a non-empty file-name prefix "
                             "for the saved models")
        if not isinstance(save_path, (str, os.PathLike)):
            raise ValueError(f"DebugOptions: save_path must be a str or os.PathLike directory, got {save_path!r}")
        save_path = os.fspath(save_path)
        if save_path and os.path.exists(save_path) and not os.path.isdir(save_path):
            raise ValueError(f"DebugOptions: save_path must be a directory, but {save_path!r} is a file")
        self._log_level = log_level
        self._save_onnx = save_onnx
        self._onnx_prefix = onnx_prefix
        self._save_path = save_path

    @property
    def log_level(self) -> LogLevel:
        return self._log_level

    @property
    def save_onnx(self) -> bool:
        return self._save_onnx

    @property
    def onnx_prefix(self) -> str:
        return self._onnx_prefix

    @property
    def save_path(self) -> str:
        return self._save_path

    @property
    def save_onnx_models(self) -> _SaveOnnxView:
        return _SaveOnnxView(self)

    @property
    def logging(self) -> _LoggingView:
        return _LoggingView(self)

    def backend_options(self) -> dict[str, Any]:
        """The same settings as options of the "ort" backend (torch.compile(..., options=...))."""
        return {"log_level": self._log_level.name, "save_onnx": self._save_onnx, "onnx_prefix": self._onnx_prefix,
                "save_path": self._save_path}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DebugOptions) and self.backend_options() == other.backend_options()

    def __hash__(self) -> int:
        return hash(tuple(self.backend_options().items()))

    def __repr__(self) -> str:
        return (f"DebugOptions(log_level=LogLevel.{self._log_level.name}, save_onnx={self._save_onnx}, "
                f"onnx_prefix={self._onnx_prefix!r}, save_path={self._save_path!r})")
