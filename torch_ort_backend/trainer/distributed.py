"""ORTTrainerOptions' `distributed` group: data parallelism through torch.distributed.

Each rank runs the same training graph on its own batch; the graph averages the gradients over the
ranks with torch.distributed's all-reduce (the op below, an ATen node in the graph) before the optimizer (trainer/optimizer_graph.py), so every
rank applies the same update and the weights stay identical without a broadcast. The process group
is the user's (`torch.distributed.init_process_group`, gloo on CPU, NCCL on GPU): we never build a
communication layer of our own.
"""

from __future__ import annotations

import torch

from .optimizer_graph import DataParallel


def _all_reduce_mean(tensors: list[torch.Tensor], group_name: str) -> list[torch.Tensor]:
    """The gradients averaged over the ranks of the process group `group_name`, by torch.distributed:
    one flat bucket, one all_reduce (sum; gloo has no average), divided by the group's size. Returns
    views of one new bucket (no argument is written); the training graph calls it as an ATen node."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    group = _resolve_process_group(group_name)
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat, group=group)
    flat.div_(dist.get_world_size(group))
    return [part.view_as(t) for part, t in zip(flat.split([t.numel() for t in tensors]), tensors)]


# Defined with the low-level torch.library API: torch.library.custom_op refuses returns that view one
# another, which would cost a copy of every gradient per step.
_LIBRARY = torch.library.Library("tob", "FRAGMENT")
_LIBRARY.define("all_reduce_mean(Tensor[] tensors, str group_name) -> Tensor[]")
_LIBRARY.impl("all_reduce_mean", _all_reduce_mean, "CompositeExplicitAutograd")


def data_parallel(options) -> DataParallel | None:
    """The DataParallel setting of `options`, checked against torch.distributed; None on one rank."""
    d = options.distributed
    if d.world_size == 1:
        if d.world_rank != 0 or d.data_parallel_size != 1:
            raise ValueError(f"distributed.world_size is 1, but world_rank is {d.world_rank} and data_parallel_size "
                             f"{d.data_parallel_size}: expected 0 and 1")
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"distributed.world_size is {d.world_size}: call torch.distributed.init_process_group "
                           "(gloo on CPU) in every rank before creating the ORTTrainer")
    if dist.get_world_size() != d.world_size or dist.get_rank() != d.world_rank:
        raise ValueError(f"distributed.world_size/world_rank are {d.world_size}/{d.world_rank}, but torch.distributed "
                         f"runs rank {dist.get_rank()} of {dist.get_world_size()}")
    if d.data_parallel_size != d.world_size:
        raise ValueError(f"distributed.data_parallel_size ({d.data_parallel_size}) must equal world_size "
                         f"({d.world_size}): every rank is a data-parallel replica")
    return DataParallel(d.world_size, dist.group.WORLD.group_name, bool(d.allreduce_post_accumulation))
