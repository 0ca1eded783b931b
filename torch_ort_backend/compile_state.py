"""What the "ort" backend keeps between compilations, in one object with a clear lifetime.

``COMPILE_STATE`` is created when the package is imported and lives as long as the process: the
counters behind ``compile_stats()``, the engine sessions shared by identical exports, the
per-stage numbering of compiled graphs and the graphs still alive (held weakly: TorchDynamo's
cache owns them, so a graph leaves when dynamo drops it, e.g. on ``torch._dynamo.reset()``).
Shared sessions live as long as the state, so a graph compiled again after a reset reuses its
session instead of creating one.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CompileStats:
    """Counters the backend exposes (torch_ort_backend.backend.compile_stats()): tests use them to show
    that a new sequence length reused a session instead of exporting again."""

    graphs: int = 0  # graphs handed to fw/bw/inference compilers
    exports: int = 0  # FX -> ONNX exports
    sessions_created: int = 0
    session_cache_hits: int = 0  # an export identical to an earlier one reused its session
    runs: int = 0
    fallbacks: int = 0  # graphs (or runs) sent to eager by the policy
    recompile_limit_fallbacks: int = 0  # functions TorchDynamo runs in eager past its recompile limit
    label_sparse_rewrites: int = 0  # losses computed over the valid labels only (compute_optimizer/)
    embedding_sparse_rewrites: int = 0  # graphs compiled with the per-token layers over valid tokens only
    aten_fallback_ops: Counter = field(default_factory=Counter)

    def reset(self) -> None:
        self.__init__()


class CompileState:
    """The backend's state across compilations (see the module docstring)."""

    def __init__(self) -> None:
        self.stats = CompileStats()
        self._sessions: dict[Hashable, Any] = {}
        self._sessions_lock = threading.Lock()
        self._graphs_per_stage: Counter = Counter()
        self._live: weakref.WeakSet = weakref.WeakSet()

    def register_graph(self, graph: Any, stage: str) -> tuple[str, int]:
        """Numbers a new compiled graph: (its name, e.g. "forward_3"; its serial over all stages)."""
        self._graphs_per_stage[stage] += 1
        self._live.add(graph)
        self.stats.graphs += 1
        return f"{stage}_{self._graphs_per_stage[stage] - 1}", sum(self._graphs_per_stage.values())

    def live_graphs(self) -> list:
        """The compiled graphs still referenced, oldest first."""
        return sorted(self._live, key=lambda g: g.serial)

    def clear_sessions(self) -> None:
        """Drops the shared sessions: the next graph of each export creates (and logs) its own."""
        with self._sessions_lock:
            self._sessions.clear()

    def shared_session(self, key: Hashable, create: Callable[[], Any], reuse: bool = True) -> Any:
        """The session cached under ``key``, or a new one from ``create()`` (cached for the next
        identical export). ``reuse=False`` always creates (and caches) a new one."""
        with self._sessions_lock:
            cached = self._sessions.get(key)
        if cached is not None and reuse:
            self.stats.session_cache_hits += 1
            return cached
        session = create()
        self.stats.sessions_created += 1
        with self._sessions_lock:
            self._sessions[key] = session
        return session


COMPILE_STATE = CompileState()


def live_graphs() -> list:
    """The compiled graphs still referenced (by dynamo's cache), oldest first (for tests and tools)."""
    return COMPILE_STATE.live_graphs()
