"""The log level option (LogLevel / ORTMODULE_LOG_LEVEL) applied to the "torch_ort_backend" logger.

The backend and ORTModule log through that one logger: the partition report at INFO; the engine's
applied passes, partition, execution plan and each run's memory at DEBUG (our VERBOSE). Setting a
level only helps if something prints the records, so when the user asks for INFO or VERBOSE and no
handler would show them (a script that never configured logging), a stderr handler is added.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Mapping

LOGGER_NAME = "torch_ort_backend"

PYTHON_LEVELS = {
    "VERBOSE": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}

_LOG_LEVEL_ENV = "ORTMODULE_LOG_LEVEL"


class _OurHandler(logging.StreamHandler):
    """The handler configure_logging adds; a class of its own so it is never added twice."""


def configure_logging(level: str) -> logging.Logger:
    """Sets the backend's logger to `level` (a LOG_LEVELS name) and makes INFO/VERBOSE visible."""
    logger = logging.getLogger(LOGGER_NAME)
    python_level = PYTHON_LEVELS[level]
    logger.setLevel(python_level)
    ours = [h for h in logger.handlers if isinstance(h, _OurHandler)]
    if python_level <= logging.INFO and not ours and not logger.hasHandlers():
        handler = _OurHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s torch_ort_backend %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    return logger


def log_level_requested(options: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user chose a log level (an option or ORTMODULE_LOG_LEVEL): only then is the logger
    touched, so the default never overrides a level the application set itself."""
    environ = os.environ if environ is None else environ
    return bool(options and "log_level" in options) or _LOG_LEVEL_ENV in environ
