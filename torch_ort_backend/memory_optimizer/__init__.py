"""The memory optimizer: recompute plans for training graphs (docs/memory_optimizer.md).

``partition_with_plans`` is the "ort" backend's AOTAutograd partition_fn; ``plans`` parses the
``memory_opt_config`` option (ORTMODULE_MEMORY_OPT_CONFIG); ``report`` writes the "Memory
Optimizer" table.
"""

from .partition import partition_with_plans, select
from .plans import LAYER_PLAN, PlanConfig, parse_config, parse_plan

__all__ = ["LAYER_PLAN", "PlanConfig", "parse_config", "parse_plan", "partition_with_plans", "select"]
