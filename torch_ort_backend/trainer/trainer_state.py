"""What persists between ORTTrainer's steps: the model's parameters and buffers, the optimizer's
moments and step counts and the gradient accumulators, as tensors bound to the engine sessions (which
update them in place); and their state_dict in onnxruntime-training's structure.

The weights ARE the model's own parameter tensors: after a step, `model.parameters()` hold the
trained values, with no copy in either direction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ..optim.config import _OptimizerConfig
from .zero import ZeroPartition, piece_of

FORMAT_KEYS = ("model", "optimizer", "trainer_options", "train_step_info")


class TrainerState:
    def __init__(self, model: nn.Module, config: _OptimizerConfig, frozen: list[str], accumulation: bool,
                 zero_ranks: tuple[int, int] | None = None) -> None:
        """`zero_ranks` (world_size, rank) partitions the optimizer states over the ranks (ZeRO stage
        1, trainer/zero.py)."""
        self.model = model
        self.config = config
        self.frozen = set(frozen)
        self.tensors: dict[str, torch.Tensor] = {}
        self.params: list[str] = []
        self.trainable: list[str] = []
        for name, p in model.named_parameters():
            self._check_weight(name, p)
            self.tensors[name] = p.data
            self.params.append(name)
            if p.requires_grad and name not in self.frozen:
                self.trainable.append(name)
        self.buffers = [n for n, _ in model.named_buffers()]
        for name, b in model.named_buffers():
            if not b.is_contiguous():
                raise ValueError(f"buffer '{name}' is not contiguous; ORTTrainer updates buffers in place")
            self.tensors[name] = b.data
        self.zero: ZeroPartition | None = None
        if zero_ranks is not None:
            if config.name == "LambOptimizer":
                raise NotImplementedError("ZeRO (distributed.deepspeed_zero_optimization.stage=1) with Lamb: Lamb's trust "
                                          "ratio needs the norms of whole weights, which ZeRO splits over the ranks; "
                                          "use AdamOptimizer or SGDOptimizer, or stage 0")
            self.zero = ZeroPartition.build([(w, tuple(self.tensors[w].shape)) for w in self.trainable], *zero_ranks)
        # Optimizer state per trainable weight, as the graph names it (trainer/optimizer_graph.py);
        # under ZeRO only for this rank's pieces (flat when a piece is part of its weight).
        self.optimizer: dict[str, dict[str, str]] = {}
        self.shared: dict[str, str] = {}
        for w in self.trainable:
            p = self.tensors[w]
            if self.zero is not None and w not in self.zero.pieces:
                pass
            elif config.name in ("AdamOptimizer", "LambOptimizer"):
                piece = self.zero.pieces[w] if self.zero is not None else None
                like = p if piece is None or piece.whole else p.new_empty(piece.size)
                entry = {"Moment_1": f"Moment_1_{w}", "Moment_2": f"Moment_2_{w}"}
                self.tensors[entry["Moment_1"]] = torch.zeros_like(like)
                self.tensors[entry["Moment_2"]] = torch.zeros_like(like)
                if config.name == "AdamOptimizer":
                    entry["Update_Count"] = f"Update_Count_{w}"
                    # The 1-based index of the next update (onnxruntime-training started it at 1).
                    self.tensors[entry["Update_Count"]] = torch.ones(1, dtype=torch.int64)
                self.optimizer[w] = entry
            if accumulation:
                self.tensors[f"{w}_grad_accumulator"] = torch.zeros_like(p)
        if config.name == "LambOptimizer":
            self.shared["step"] = "Step"
            self.tensors["Step"] = torch.ones(1, dtype=torch.int64)
        self.accumulation = accumulation

    @staticmethod
    def _check_weight(name: str, p: torch.Tensor) -> None:
        if p.device.type != "cpu":
            raise ValueError(f"parameter '{name}' is on {p.device}; this trainer runs on the CPU")
        if p.dtype != torch.float32:
            raise ValueError(f"parameter '{name}' is {p.dtype}; ORTTrainer trains float32 weights (mixed precision "
                             "is issue 20)")
        if not p.is_contiguous():
            raise ValueError(f"parameter '{name}' is not contiguous; ORTTrainer updates weights in place")

    def add_constants(self, constants: dict[str, torch.Tensor]) -> None:
        for name, t in constants.items():
            self.tensors.setdefault(name, t.detach().contiguous())

    def tensor(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    # ---- state_dict ----
    def state_dict(self, info, options) -> dict:
        model = {name: _array(self.tensors[name]) for name in self.params + self.buffers}
        optimizer: dict[str, Any] = {}
        for w, entry in self.optimizer.items():
            optimizer[w] = {key: _array(self.tensors[name]) for key, name in entry.items()}
        if self.shared:
            optimizer["shared_optimizer_state"] = {k: _array(self.tensors[n]) for k, n in self.shared.items()}
        sd = {
            "model": {"full_precision": model},
            "optimizer": optimizer,
            "trainer_options": {
                "mixed_precision": bool(options.mixed_precision.enabled),
                "zero_stage": int(options.distributed.deepspeed_zero_optimization.stage),
                "world_rank": int(options.distributed.world_rank),
                "world_size": int(options.distributed.world_size),
                "optimizer_name": self.config.name,
                "data_parallel_size": int(options.distributed.data_parallel_size),
                "horizontal_parallel_size": int(options.distributed.horizontal_parallel_size),
            },
            "train_step_info": {"optimization_step": int(info.optimization_step), "step": int(info.step)},
        }
        if self.zero is not None:
            sd["partition_info"] = self.zero.partition_info()
        if self.accumulation:
            # Not in onnxruntime-training's structure: the gradient sums of a step taken mid-accumulation,
            # so that a resumed run continues exactly.
            sd["gradient_accumulation"] = {w: _array(self.tensors[f"{w}_grad_accumulator"]) for w in self.trainable}
        return sd

    def pytorch_state_dict(self) -> dict:
        return {name: self.tensors[name].detach().clone() for name in self.params + self.buffers}

    def load_state_dict(self, sd: Any, strict: bool, info, options) -> None:
        if not isinstance(sd, dict):
            raise TypeError(f"state_dict must be a dict, got {type(sd).__name__}")
        if sd and all(isinstance(v, torch.Tensor) for v in sd.values()) and "model" not in sd:
            writes = self._plan_pytorch(sd, strict)
            self._apply(writes)
            return
        writes: list[tuple[torch.Tensor, np.ndarray | torch.Tensor, str]] = []
        for key in ("model",):
            if key not in sd:
                raise ValueError(f"state_dict has no '{key}' entry; expected the keys {list(FORMAT_KEYS)}")
        model = sd["model"]
        if not isinstance(model, dict) or "full_precision" not in model or not isinstance(model["full_precision"], dict):
            raise ValueError("state_dict['model'] must be {'full_precision': {weight name: array}}")
        self._plan_group(model["full_precision"], self.params + self.buffers, "state_dict['model']['full_precision']",
                         strict, writes, lambda n: self.tensors[n])
        if "optimizer" in sd:
            opt = sd["optimizer"]
            if not isinstance(opt, dict):
                raise ValueError("state_dict['optimizer'] must be a dict")
            saved_name = sd.get("trainer_options", {}).get("optimizer_name")
            if saved_name is not None and saved_name != self.config.name:
                raise ValueError(f"the state_dict was saved by {saved_name}; this trainer uses {self.config.name}")
            weights = [k for k in opt if k != "shared_optimizer_state"]
            if self.zero is not None:
                opt, weights = self._own_pieces(opt, weights)
            if strict:
                extra = sorted(set(weights) - set(self.optimizer))
                missing = sorted(set(self.optimizer) - set(weights))
                if extra or missing:
                    raise ValueError(f"state_dict['optimizer'] does not match this trainer: unexpected {extra}, "
                                     f"missing {missing}")
            for w in weights:
                if w not in self.optimizer:
                    continue
                entry = self.optimizer[w]
                self._plan_group(opt[w], list(entry), f"state_dict['optimizer']['{w}']", strict, writes,
                                 lambda k, entry=entry: self.tensors[entry[k]])
            if self.shared:
                shared = opt.get("shared_optimizer_state")
                if shared is None and strict:
                    raise ValueError("state_dict['optimizer'] has no 'shared_optimizer_state' (the step count)")
                if shared is not None:
                    self._plan_group(shared, list(self.shared), "state_dict['optimizer']['shared_optimizer_state']",
                                     strict, writes, lambda k: self.tensors[self.shared[k]])
        elif strict:
            raise ValueError("state_dict has no 'optimizer' entry (use strict=False to load the model only)")
        if "gradient_accumulation" in sd and self.accumulation:
            self._plan_group(sd["gradient_accumulation"], self.trainable, "state_dict['gradient_accumulation']",
                             False, writes, lambda w: self.tensors[f"{w}_grad_accumulator"])
        step_info = sd.get("train_step_info")
        if step_info is not None:
            if not (isinstance(step_info, dict) and all(isinstance(step_info.get(k), (int, np.integer))
                                                          for k in ("optimization_step", "step"))):
                raise ValueError("state_dict['train_step_info'] must hold int 'optimization_step' and 'step'")
        elif strict:
            raise ValueError("state_dict has no 'train_step_info'")
        self._apply(writes)
        if step_info is not None:
            info.optimization_step = int(step_info["optimization_step"])
            info.step = int(step_info["step"])

    def _own_pieces(self, opt: dict, weights: list[str]) -> tuple[dict, list[str]]:
        """Under ZeRO: the optimizer states of this rank's pieces, taken out of whole states (an
        aggregated or unpartitioned state_dict) or kept as they are (this rank's own shard)."""
        own = {}
        for w in weights:
            if w not in self.zero.pieces:
                continue  # another rank's weight
            piece = self.zero.pieces[w]
            states = opt[w]
            if not isinstance(states, dict):
                raise ValueError(f"state_dict['optimizer']['{w}'] must be a dict of state name -> array")
            own[w] = {k: (piece_of(torch.as_tensor(np.asarray(v)), piece)
                          if k in ("Moment_1", "Moment_2") and tuple(np.shape(v)) == self.zero.shapes[w] and not piece.whole
                          else v) for k, v in states.items()}
        if "shared_optimizer_state" in opt:
            own["shared_optimizer_state"] = opt["shared_optimizer_state"]
        return own, list(own.keys() - {"shared_optimizer_state"})

    def _plan_pytorch(self, sd: dict, strict: bool) -> list:
        writes: list = []
        self._plan_group(sd, self.params + self.buffers, "state_dict", strict, writes, lambda n: self.tensors[n])
        return writes

    @staticmethod
    def _plan_group(given: Any, expected: list[str], where: str, strict: bool, writes: list, target) -> None:
        if not isinstance(given, dict):
            raise ValueError(f"{where} must be a dict of name -> array")
        if strict:
            extra = sorted(set(given) - set(expected))
            missing = sorted(set(expected) - set(given))
            if extra or missing:
                raise ValueError(f"{where} does not match this trainer: unexpected {extra}, missing {missing}")
        for name in expected:
            if name not in given:
                continue
            value = given[name]
            dst = target(name)
            if isinstance(value, torch.Tensor):
                src_shape, src_dtype = tuple(value.shape), value.dtype
            elif isinstance(value, np.ndarray):
                src_shape, src_dtype = value.shape, torch.from_numpy(np.zeros(0, dtype=value.dtype)).dtype
            else:
                raise ValueError(f"{where}['{name}'] must be an array or tensor, got {type(value).__name__}")
            if tuple(src_shape) != tuple(dst.shape) or src_dtype != dst.dtype:
                raise ValueError(f"{where}['{name}'] is {src_dtype}{list(src_shape)}; this trainer holds "
                                 f"{dst.dtype}{list(dst.shape)}")
            writes.append((dst, value, f"{where}['{name}']"))

    @staticmethod
    def _apply(writes: list) -> None:
        with torch.no_grad():
            for dst, value, _ in writes:
                dst.copy_(torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value)


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().copy()
