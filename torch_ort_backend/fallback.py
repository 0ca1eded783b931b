"""The fallback policy: which failure classes run the graph in eager PyTorch (with one warning naming
the cause) and which are raised. Flag names and values follow onnxruntime-training's _FallbackPolicy."""

from __future__ import annotations

import enum
import logging
import warnings
from typing import Any

from .errors import (
    BadInitializationError,
    FallbackError,
    UnsupportedDataError,
    UnsupportedDeviceError,
    UnsupportedOnnxModelError,
    UnsupportedTorchModelError,
)

logger = logging.getLogger("torch_ort_backend")


class FallbackPolicy(enum.IntFlag):
    FALLBACK_DISABLE = 1
    FALLBACK_FORCE_TORCH_FORWARD = 2
    FALLBACK_FORCE_TORCH_BACKWARD = 4
    FALLBACK_UNSUPPORTED_DEVICE = 8
    FALLBACK_UNSUPPORTED_DATA = 16
    FALLBACK_UNSUPPORTED_TORCH_MODEL = 32
    FALLBACK_UNSUPPORTED_ONNX_MODEL = 64
    FALLBACK_BAD_INITIALIZATION = 128


DEFAULT_POLICY = (
    FallbackPolicy.FALLBACK_UNSUPPORTED_DEVICE
    | FallbackPolicy.FALLBACK_UNSUPPORTED_DATA
    | FallbackPolicy.FALLBACK_UNSUPPORTED_TORCH_MODEL
    | FallbackPolicy.FALLBACK_UNSUPPORTED_ONNX_MODEL
)

_CLASS_FLAG = {
    UnsupportedDeviceError: FallbackPolicy.FALLBACK_UNSUPPORTED_DEVICE,
    UnsupportedDataError: FallbackPolicy.FALLBACK_UNSUPPORTED_DATA,
    UnsupportedTorchModelError: FallbackPolicy.FALLBACK_UNSUPPORTED_TORCH_MODEL,
    UnsupportedOnnxModelError: FallbackPolicy.FALLBACK_UNSUPPORTED_ONNX_MODEL,
    BadInitializationError: FallbackPolicy.FALLBACK_BAD_INITIALIZATION,
}


class FallbackWarning(UserWarning):
    """Issued once per graph when the policy runs it in eager PyTorch."""


def parse_policy(value: Any, name: str = "ORTMODULE_FALLBACK_POLICY") -> FallbackPolicy:
    """A FallbackPolicy from a FallbackPolicy, an int, or a string like
    "FALLBACK_UNSUPPORTED_DEVICE|FALLBACK_UNSUPPORTED_DATA" (the onnxruntime-training spelling; the
    "_FallbackPolicy." prefix is accepted)."""
    if isinstance(value, FallbackPolicy):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0 or value & ~sum(FallbackPolicy):
            raise ValueError(f"{name}: {value} is not a combination of the fallback flags")
        return FallbackPolicy(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be '|'-separated flag names ({_names()}), got {value!r}")
    policy = FallbackPolicy(0)
    for part in value.split("|"):
        flag = part.strip().removeprefix("_FallbackPolicy.").removeprefix("FallbackPolicy.")
        if flag not in FallbackPolicy.__members__:
            raise ValueError(f"{name}: unknown flag '{part.strip()}'; allowed: {_names()}")
        policy |= FallbackPolicy[flag]
    return policy


def _names() -> str:
    return ", ".join(FallbackPolicy.__members__)


def flag_of(error: BaseException) -> FallbackPolicy | None:
    for cls, flag in _CLASS_FLAG.items():
        if isinstance(error, cls):
            return flag
    return None


class FallbackManager:
    """Decides, for one compiled graph, whether a failure falls back to eager or is raised."""

    def __init__(self, policy: FallbackPolicy, retry: bool, what: str) -> None:
        self.policy = policy
        self.retry = retry
        self.what = what
        self.warned = False

    def should_fall_back(self, error: FallbackError) -> bool:
        if self.policy & FallbackPolicy.FALLBACK_DISABLE:
            return False
        flag = flag_of(error)
        if flag is None or not (self.policy & flag):
            return False
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"torch_ort_backend: {self.what} runs in eager PyTorch ({flag.name}): "
                f"{type(error).__name__}: {error}",
                FallbackWarning,
                stacklevel=3,
            )
        logger.info("fallback to eager for %s: %s", self.what, error)
        return True
