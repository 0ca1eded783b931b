"""One torch.compile per benchmark variant, for A/B runs of engine switches in one process.

TorchDynamo caches compiled graphs per code object: two torch.compile calls on models of one class
share the graphs, and the engine sessions, of the one compiled first, so an A/B of a switch read
when a session is created would time one variant twice. `fresh_forward` gives each variant a code
object of its own (the model's forward is traced inside it), and `engine_ops` lists the engine ops
of the graphs a variant compiled, so a benchmark can show that its variants really differ.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from torch_ort_backend.compile_state import live_graphs


class EnvVars:
    """Sets environment variables for the duration of a with-block, then restores them."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.old = dict(env), {}

    def __enter__(self) -> None:
        self.old = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc: Any) -> None:
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fresh_forward(tag: str) -> Callable[[Any, Any], Any]:
    """forward(model, batch) -> model(**batch) for a dict batch, else model(*batch), as a function
    whose code object no other call of this function shares (`tag` names it in TorchDynamo's logs)."""
    namespace: dict = {}
    source = ("def forward(model, batch):\n"
              "    return model(**batch) if isinstance(batch, dict) else model(*batch)\n")
    exec(compile(source, f"<variant {tag}>", "exec"), namespace)
    return namespace["forward"]


def graph_serials() -> set[int]:
    """The serial numbers of the compiled graphs alive now (pass to engine_ops later)."""
    return {g.serial for g in live_graphs()}


def engine_ops(before: set[int]) -> set[str]:
    """The op types of the optimised engine graphs of every graph compiled since `before`."""
    ops: set[str] = set()
    for g in live_graphs():
        if g.serial not in before and g.session is not None:
            ops |= {n["op_type"] for n in g.session._session.optimized_graph()["nodes"]}
    return ops
