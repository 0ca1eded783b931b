"""TorchDynamo's recompile limit, made visible for "ort".

Dynamo compiles one code object at most `torch._dynamo.config.recompile_limit` times (8 by default;
`accumulated_recompile_limit` across all of them). Past that it stops compiling the function and runs
it in eager PyTorch from then on (convert_frame.py: the frame's strategy becomes RUN_ONLY), and the
only trace is a log record of `torch._dynamo.convert_frame` that does not say which backend lost the
function. A model that silently stops running on the engine is what issue 18 calls out.

Dynamo exposes the event as that record, formatted from structured arguments: ("recompile_limit" or
"accumulated_recompile_limit", the limit, "'name' (file:line)", the last guard failure, a URL). A
logging.Filter on that logger sees every such record (while the logger is enabled for warnings, as it
is unless TORCH_LOGS turns dynamo's warnings off). The backend notes each function it compiles, in
the same "'name' (file:line)" form, so only functions that were running on "ort" draw our warning:
one FallbackWarning per function (again only after torch._dynamo.reset() let it compile anew),
counted in compile_stats().recompile_limit_fallbacks.
"""

from __future__ import annotations

import logging
import threading
import types
import warnings

from .compiled_graph import STATS
from .fallback import FallbackWarning

logger = logging.getLogger("torch_ort_backend")

_DYNAMO_LOGGER = "torch._dynamo.convert_frame"
_RECORD_PREFIX = "torch._dynamo hit config."

_lock = threading.Lock()
_ort_functions: set[str] = set()
_warned: set[str] = set()
_installed = False


def describe(code: types.CodeType) -> str:
    """A code object as dynamo's recompile-limit record names it."""
    return f"'{code.co_name}' ({code.co_filename}:{code.co_firstlineno})"


def _code_being_compiled() -> types.CodeType | None:
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
    except Exception:  # not inside dynamo's tracing (a direct call of the backend)
        return None
    return getattr(tx, "f_code", None)


def note_compiled_function() -> None:
    """Called by the backend while dynamo compiles a graph for it: remembers the function."""
    code = _code_being_compiled()
    if code is not None:
        function = describe(code)
        with _lock:
            _ort_functions.add(function)
            # Dynamo compiles a function past its limit only after torch._dynamo.reset(): a new round.
            _warned.discard(function)


class _RecompileLimitFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if isinstance(record.msg, str) and record.msg.startswith(_RECORD_PREFIX) and len(args) >= 3:
            limit_type, limit, function = args[0], args[1], args[2]
            with _lock:
                first = function in _ort_functions and function not in _warned
                if first:
                    _warned.add(function)
                    STATS.recompile_limit_fallbacks += 1
            if first:
                message = (f"torch_ort_backend: TorchDynamo hit torch._dynamo.config.{limit_type} ({limit}) for "
                           f"{function}; from now on that function runs in eager PyTorch, not through \"ort\". "
                           f"Raise torch._dynamo.config.{limit_type}, or make the values that change between calls "
                           f"(TORCH_LOGS=\"recompiles\" lists them) tensors or dynamic.")
                warnings.warn(message, FallbackWarning, stacklevel=2)
                logger.info("%s", message)
        return True  # dynamo's own record is printed as before


def install() -> None:
    """Adds the filter to dynamo's logger (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    logging.getLogger(_DYNAMO_LOGGER).addFilter(_RecompileLimitFilter())
