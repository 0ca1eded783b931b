"""Recompute plans as users write them: ``"<plan name>:<strategy>:<count>"``, onnxruntime-training's
ORTMODULE_MEMORY_OPT_CONFIG syntax, and exactly what the "Memory Optimizer" report prints.

- plan name: ``TransformerLayer`` (a whole transformer layer), or a cluster of ops ending in the
  stashed activation, each op followed by ``+`` (``LayerNormalization+``, ``Dropout+``,
  ``MatMul+Div+Where+Softmax+``). The op names are those of ``cluster_names.py``.
- strategy: 0 = off (the plan is listed but not applied), 1 = recompute, 2 = recompute with
  compromise (``TransformerLayer`` only: the layer's cheap ops are recomputed, the outputs of its
  matrix products and attention are kept).
- count: -1 = every occurrence, N = the first N in forward order.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from .cluster_names import is_known_op_name

LAYER_PLAN = "TransformerLayer"
OFF, RECOMPUTE, RECOMPUTE_WITH_COMPROMISE = 0, 1, 2
STRATEGY_NAMES = {OFF: "off", RECOMPUTE: "recompute", RECOMPUTE_WITH_COMPROMISE: "recompute with compromise"}


@dataclass(frozen=True)
class PlanConfig:
    """One requested plan: name, strategy (0/1/2) and count (-1 or N >= 1)."""

    name: str
    strategy: int = RECOMPUTE
    count: int = -1

    def __str__(self) -> str:
        return f"{self.name}:{self.strategy}:{self.count}"

    def applies_to(self, occurrence: int) -> bool:
        """Whether the occurrence-th (0-based, forward order) instance of the plan is recomputed."""
        return self.strategy != OFF and (self.count < 0 or occurrence < self.count)


def _int_field(text: str, what: str, where: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{where}: the {what} must be an integer, got {text.strip()!r}") from None


def parse_plan(text: Any, where: str = "plan") -> PlanConfig:
    """``"<plan name>:<strategy>:<count>"`` -> PlanConfig; ValueError naming the plan and the fault."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: a plan is a string '<plan name>:<strategy>:<count>', got {text!r}")
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"{where}: plan {text!r} is not '<plan name>:<strategy>:<count>' "
                         "(e.g. 'TransformerLayer:1:-1' or 'Gelu+:1:-1')")
    name = parts[0].strip()
    strategy = _int_field(parts[1], "strategy", f"{where}: plan {text!r}")
    count = _int_field(parts[2], "count", f"{where}: plan {text!r}")
    if strategy not in STRATEGY_NAMES:
        raise ValueError(f"{where}: plan {text!r}: strategy must be 0 (off), 1 (recompute) or 2 (recompute with "
                         f"compromise), got {strategy}")
    if count == 0 or count < -1:
        raise ValueError(f"{where}: plan {text!r}: count must be -1 (every occurrence) or a positive number, "
                         f"got {count}")
    check_plan_name(name, f"{where}: plan {text!r}")
    if strategy == RECOMPUTE_WITH_COMPROMISE and name != LAYER_PLAN:
        raise ValueError(f"{where}: plan {text!r}: strategy 2 (recompute with compromise) exists for "
                         f"{LAYER_PLAN} only; an op cluster is recomputed whole (strategy 1)")
    return PlanConfig(name, strategy, count)


def check_plan_name(name: str, where: str) -> None:
    """A plan name is TransformerLayer or op names each followed by '+'; ValueError naming an
    unknown op name (a typo would otherwise match nothing, silently)."""
    if name == LAYER_PLAN:
        return
    if not name or not name.endswith("+"):
        raise ValueError(f"{where}: unknown plan name {name!r}: a plan is '{LAYER_PLAN}' or op names each "
                         "followed by '+', as the Memory Optimizer report prints them (e.g. 'Gelu+')")
    unknown = [op for op in name[:-1].split("+") if not is_known_op_name(op)]
    if unknown:
        raise ValueError(f"{where}: unknown plan name {name!r}: {', '.join(repr(u) for u in unknown)} is not an op "
                         "name of the Memory Optimizer report (docs/memory_optimizer.md lists them)")


def parse_plan_list(value: Any, where: str) -> tuple[PlanConfig, ...]:
    """A list of plan strings -> plans; ValueError naming the entry at fault. A plan named twice is
    an error too: which of the two strategies would hold?"""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: expected a list of plans '<plan name>:<strategy>:<count>', "
                         f"got {type(value).__name__}")
    plans = tuple(parse_plan(item, f"{where}, entry {i}") for i, item in enumerate(value))
    seen: dict[str, PlanConfig] = {}
    for p in plans:
        if p.name in seen:
            raise ValueError(f"{where}: plan {p.name!r} is listed twice ({seen[p.name]} and {p})")
        seen[p.name] = p
    return plans


def load_config_file(path: str, where: str) -> tuple[PlanConfig, ...]:
    """The JSON file of ORTMODULE_MEMORY_OPT_CONFIG: a list of plan strings."""
    if not os.path.isfile(path):
        raise ValueError(f"{where}: the memory optimizer config file {path!r} does not exist"
                         if not os.path.exists(path) else f"{where}: {path!r} is not a file")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: {path!r} is not valid JSON ({e}); expected a list of plans such as "
                         '["TransformerLayer:1:-1", "Gelu+:1:-1"]') from None
    return parse_plan_list(value, f"{where} ({path})")


def parse_config(where: str, value: Any) -> tuple[PlanConfig, ...]:
    """The ``memory_opt_config`` option / ORTMODULE_MEMORY_OPT_CONFIG variable: a path to a JSON
    file holding a list of plans, or (option only) the list itself; "" = no plans."""
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        return load_config_file(path, where) if path else ()
    if isinstance(value, (list, tuple)):
        return parse_plan_list(value, where)
    raise ValueError(f"{where} must be the path of a JSON file holding a list of plans, or a list of plans "
                     f"'<plan name>:<strategy>:<count>', got {type(value).__name__}")
