"""ZeRO stage 1 for ORTTrainer (`distributed.deepspeed_zero_optimization.stage = 1`): the optimizer's
states are partitioned over the data-parallel ranks, as onnxruntime-training's ORTTrainer did.

The trainable weights are laid end to end in the model's parameter order and the flat sequence is
cut into `world_size` equal chunks; rank r owns chunk r. A weight that straddles a cut is split, and
each rank keeps the moments of its own piece only (flat, with the weight's shape recorded in the
state_dict's `partition_info`, the reference's format). Every rank still computes the whole forward
and backward and all-reduces the gradients (stage 1 partitions only the optimizer states); it then
updates only its own pieces, and one all-gather (torch.distributed, an ATen node in the graph)
hands every rank the whole updated weights. Moments take 1/world_size of the memory they take
without ZeRO.

Lamb is refused: its trust ratio needs the norm of the whole weight and of its whole update, which
a split weight does not have on any one rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Piece:
    """The part [start, end) of the flattened weight that this rank updates."""

    start: int
    end: int
    numel: int  # of the whole weight

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end == self.numel

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ZeroPartition:
    """Which pieces of which weights rank `rank` of `world_size` updates."""

    world_size: int
    rank: int
    chunk: int  # flat elements per rank (the last rank's chunk is padded)
    offsets: dict[str, int]  # weight -> offset in the flat sequence
    shapes: dict[str, tuple[int, ...]]
    pieces: dict[str, Piece]  # only the weights with a piece on this rank

    @staticmethod
    def build(weights: list[tuple[str, tuple[int, ...]]], world_size: int, rank: int) -> ZeroPartition:
        """`weights`: (name, shape) of the trainable weights in the model's parameter order."""
        numels = {name: int(np.prod(shape, dtype=np.int64)) for name, shape in weights}
        total = sum(numels.values())
        if total == 0:
            raise ValueError("ZeRO needs at least one trainable weight")
        chunk = -(-total // world_size)
        lo, hi = rank * chunk, min((rank + 1) * chunk, total)
        offsets, pieces = {}, {}
        offset = 0
        for name, _ in weights:
            n = numels[name]
            offsets[name] = offset
            start, end = max(offset, lo), min(offset + n, hi)
            if start < end:
                pieces[name] = Piece(start - offset, end - offset, n)
            offset += n
        return ZeroPartition(world_size, rank, chunk, offsets, dict(weights), pieces)

    def numel(self, weight: str) -> int:
        return int(np.prod(self.shapes[weight], dtype=np.int64))

    @property
    def local_size(self) -> int:
        return sum(p.size for p in self.pieces.values())

    def partition_info(self) -> dict[str, dict]:
        """The state_dict's `partition_info`: the weights whose optimizer state this rank holds only a
        piece of, with their original shape (onnxruntime-training's keys; no Megatron row split)."""
        return {w: {"original_dim": np.array(self.shapes[w], dtype=np.int64), "megatron_row_partition": -1}
                for w, p in self.pieces.items() if not p.whole}


def piece_of(full: torch.Tensor, piece: Piece) -> torch.Tensor:
    """This rank's piece of a whole-weight tensor (a full-shape moment, say): the tensor itself for a
    whole piece, else the flat slice."""
    return full if piece.whole else full.reshape(-1)[piece.start:piece.end]


def _zero_all_gather(local: torch.Tensor, group_name: str) -> torch.Tensor:
    """Every rank's updated chunk (`local`, equal sizes on all ranks), gathered in rank order into one
    flat tensor by torch.distributed; the training graph calls it as an ATen node."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    group = _resolve_process_group(group_name)
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
    # A copy, not `local` itself: `local` is the engine's memory of this run, and gloo's work object
    # keeps its input alive and drops it later on gloo's own thread, after the run that owns the
    # memory has ended (a use after free in the run's allocator).
    dist.all_gather(parts, local.clone(), group=group)
    return torch.cat(parts)


_LIBRARY = torch.library.Library("tob", "FRAGMENT")
_LIBRARY.define("zero_all_gather(Tensor local, str group_name) -> Tensor")
_LIBRARY.impl("zero_all_gather", _zero_all_gather, "CompositeExplicitAutograd")


def aggregate_optimizer_states(rank_dicts: list[dict]) -> dict:
    """One unpartitioned `optimizer` group from the ranks' state_dicts (in rank order): the pieces of
    each split weight's moments concatenated and given back their original shape; unsplit states
    (whole moments, update counts, the shared step) must agree wherever several ranks hold them."""
    merged: dict[str, dict] = {}
    pieces: dict[str, dict[str, list[np.ndarray]]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for rank, sd in enumerate(rank_dicts):
        info = sd.get("partition_info", {})
        for w, states in sd.get("optimizer", {}).items():
            for key, value in states.items():
                if w in info and key in ("Moment_1", "Moment_2"):
                    shapes[w] = tuple(int(d) for d in np.asarray(info[w]["original_dim"]).reshape(-1))
                    pieces.setdefault(w, {}).setdefault(key, []).append(np.asarray(value).reshape(-1))
                    continue
                held = merged.setdefault(w, {})
                if key in held and not np.array_equal(held[key], value):
                    raise ValueError(f"rank {rank}'s optimizer state '{w}/{key}' differs from an earlier rank's: "
                                     "the checkpoints are not of one run")
                held[key] = value
    for w, by_key in pieces.items():
        for key, parts in by_key.items():
            flat = np.concatenate(parts)
            if flat.size != int(np.prod(shapes[w], dtype=np.int64)):
                raise ValueError(f"the pieces of optimizer state '{w}/{key}' hold {flat.size} values; its weight "
                                 f"has shape {list(shapes[w])}: a rank's checkpoint is missing")
            merged.setdefault(w, {})[key] = flat.reshape(shapes[w])
    return merged
