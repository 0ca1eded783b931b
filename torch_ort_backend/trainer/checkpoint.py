"""ORTTrainer checkpoint files: one torch.save archive holding a marker, the trainer's state_dict (its
arrays as tensors) and the user's dict; read back with torch.load(weights_only=True), which builds
only tensors and plain containers (a checkpoint file cannot run code).

Several files (one per rank of a run) are aggregated into one unpartitioned state_dict: the model
must agree across the files (every rank holds all weights); without ZeRO every rank also holds the
whole optimizer state and rank 0's is taken, and with ZeRO stage 1 each rank's pieces of the
optimizer states are joined (trainer/zero.py). The result loads into a trainer of any world size.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

import numpy as np
import torch

from .zero import aggregate_optimizer_states

MARKER = "torch_ort_backend.ORTTrainer.checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A file that is not a readable ORTTrainer checkpoint (truncated, foreign or of another version)."""


def save(path: str, state_dict: dict, user_dict: dict) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path, got {type(path).__name__}")
    if not isinstance(user_dict, dict):
        raise TypeError(f"user_dict must be a dict, got {type(user_dict).__name__}")
    path = os.fspath(path)
    if os.path.exists(path):
        raise FileExistsError(f"checkpoint path '{path}' already exists; ORTTrainer never overwrites a checkpoint")
    payload = {"marker": MARKER, "version": VERSION, "state_dict": _to_tensors(state_dict), "user_dict": user_dict}
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".ortcp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
        os.link(tmp, path)  # fails if the path appeared meanwhile: never overwrite
    finally:
        os.unlink(tmp)


def load(paths: Sequence[str]) -> tuple[dict, dict]:
    if not paths:
        raise ValueError("load_checkpoint needs at least one checkpoint path")
    loaded = [_load_one(p) for p in paths]
    if len(loaded) == 1:
        return loaded[0]
    return _aggregate(paths, loaded)


def _load_one(path: str) -> tuple[dict, dict]:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint path must be a file path, got {type(path).__name__}")
    try:
        payload = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a damaged archive
        raise CheckpointError(f"'{path}' is not a readable ORTTrainer checkpoint: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None
    if not isinstance(payload, dict) or payload.get("marker") != MARKER:
        raise CheckpointError(f"'{path}' is not an ORTTrainer checkpoint (no '{MARKER}' marker)")
    if payload.get("version") != VERSION:
        raise CheckpointError(f"'{path}' is an ORTTrainer checkpoint of version {payload.get('version')!r}; "
                              f"this version reads {VERSION}")
    sd, user = payload.get("state_dict"), payload.get("user_dict")
    if not isinstance(sd, dict) or not isinstance(user, dict):
        raise CheckpointError(f"'{path}': state_dict and user_dict must be dicts")
    return _to_arrays(sd), user


def _aggregate(paths: Sequence[str], loaded: list[tuple[dict, dict]]) -> tuple[dict, dict]:
    infos = [sd.get("trainer_options", {}) for sd, _ in loaded]
    stages = {int(i.get("zero_stage", 0)) for i in infos}
    sizes = {int(i.get("world_size", 1)) for i in infos}
    ranks = sorted(int(i.get("world_rank", 0)) for i in infos)
    if len(sizes) != 1 or ranks != list(range(len(loaded))) or sizes != {len(loaded)}:
        raise CheckpointError(f"checkpoints {list(paths)} are not the ranks 0..{len(loaded) - 1} of one run "
                              f"(world sizes {sorted(sizes)}, ranks {ranks})")
    if len(stages) != 1:
        raise CheckpointError(f"checkpoints {list(paths)} mix ZeRO stages {sorted(stages)}: not one run")
    by_rank = {int(sd.get("trainer_options", {}).get("world_rank", 0)): (sd, user) for sd, user in loaded}
    first = by_rank[0][0]["model"]["full_precision"]
    for rank, (sd, _) in by_rank.items():
        other = sd["model"]["full_precision"]
        if set(other) != set(first) or any(not np.array_equal(other[k], first[k]) for k in first):
            raise CheckpointError(f"rank {rank}'s model state differs from rank 0's: not replicas of one run")
    if stages == {0}:
        return by_rank[0]
    ordered = [by_rank[r][0] for r in range(len(loaded))]
    if any("optimizer" in sd and "partition_info" not in sd for sd in ordered):
        raise CheckpointError("a ZeRO checkpoint without 'partition_info': cannot join its optimizer states")
    merged = {k: v for k, v in ordered[0].items() if k != "partition_info"}
    if any("optimizer" in sd for sd in ordered):
        try:
            merged["optimizer"] = aggregate_optimizer_states(ordered)
        except ValueError as e:
            raise CheckpointError(f"checkpoints {list(paths)}: {e}") from None
    merged["trainer_options"] = dict(ordered[0]["trainer_options"], zero_stage=0, world_rank=0, world_size=1,
                                     data_parallel_size=1)
    return merged, by_rank[0][1]


def _to_tensors(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    if isinstance(x, dict):
        return {k: _to_tensors(v) for k, v in x.items()}
    return x


def _to_arrays(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.numpy()
    if isinstance(x, dict):
        return {k: _to_arrays(v) for k, v in x.items()}
    return x
