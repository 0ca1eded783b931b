"""DistributedDataParallel with "ort" on 2 CPU ranks (gloo, loopback), each wrapping against eager
DDP: the loss of every step, every (all-reduced) gradient, every parameter after SGD.

The three wrappings of docs/distributed.md:
- DDP(torch.compile(m, backend="ort")): DDP's reducer all-reduces the gradients the engine's
  backward graph produced.
- torch.compile(DDP(m), backend="ort").
- DDP(ORTModule(m)): onnxruntime-training's form.
In all three TorchDynamo's DDPOptimizer splits the graph at DDP's bucket boundaries
(bucket_cap_mb=1 here, with ~2 MB of parameters), so a bucket's all-reduce starts while the
engine still computes the backward of the next: asserted as more than one forward graph.

All configurations run in one 2-process launch (a module-scoped fixture): starting Python, torch
and a process group once keeps this file within its CI budget.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from distributed_harness import (
    assert_compiled_on_every_rank,
    assert_same_training,
    init_gloo,
    new_record,
    ort_counters,
    record_grads,
    record_params,
    reset_compilation,
    run_on_ranks,
)
from distributed_models import batch, make_block_stack

STEPS = 3
SIZES = {"width": 256, "hidden": 512, "blocks": 2}
BUCKET_CAP_MB = 1  # DDPOptimizer's first bucket is 1 MB; later buckets may not be smaller


def _train(call, module: nn.Module, rank: int) -> dict:
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    record = new_record()
    for step in range(STEPS):
        x, y = batch(step, rank, width=SIZES["width"])
        optimizer.zero_grad(set_to_none=True)
        loss = call(x, y)
        loss.backward()
        record["losses"].append(loss.detach().clone())
        record_grads(record, module.named_parameters())
        optimizer.step()
        record_params(record, module.named_parameters())
    return record


def _run(wrap, rank: int) -> dict:
    from torch_ort_backend.compiled_graph import live_graphs

    reset_compilation()
    model = make_block_stack(**SIZES)
    wrapped = wrap(model)
    result = _train(wrapped, model, rank)
    result["counters"] = ort_counters()
    result["forward_graphs"] = sum(1 for g in live_graphs() if g.stage == "forward")
    return result


def ddp_worker(rank: int, world_size: int) -> dict:
    from torch_ort_backend import ORTModule

    init_gloo()
    wrappings = {
        "eager": lambda m: DDP(m, bucket_cap_mb=BUCKET_CAP_MB),
        "ddp_of_compiled": lambda m: DDP(torch.compile(m, backend="ort"), bucket_cap_mb=BUCKET_CAP_MB),
        "compiled_ddp": lambda m: torch.compile(DDP(m, bucket_cap_mb=BUCKET_CAP_MB), backend="ort"),
        "ddp_of_ortmodule": lambda m: DDP(ORTModule(m), bucket_cap_mb=BUCKET_CAP_MB),
    }
    results = {name: _run(wrap, rank) for name, wrap in wrappings.items()}
    torch.distributed.destroy_process_group()
    return results


@pytest.fixture(scope="module")
def ddp_results():
    return run_on_ranks("test_distributed_ddp:ddp_worker")


@pytest.mark.parametrize("wrapping", ["ddp_of_compiled", "compiled_ddp", "ddp_of_ortmodule"])
def test_ddp_wrapping_trains_like_eager_ddp(ddp_results, wrapping):
    per_rank = [r[wrapping] for r in ddp_results]
    assert_compiled_on_every_rank(per_rank, wrapping)
    for rank, result in enumerate(ddp_results):
        assert_same_training(result["eager"], result[wrapping], f"{wrapping} on rank {rank}")


def test_ddp_gradients_are_all_reduced(ddp_results):
    """The comparison above is only about DDP if the ranks' gradients are their average: the
    batches differ per rank, so equal gradients on both ranks show the all-reduce happened."""
    for wrapping in ("eager", "ddp_of_compiled", "compiled_ddp", "ddp_of_ortmodule"):
        first, second = (r[wrapping]["grads"][0] for r in ddp_results)
        for name, grad in first.items():
            torch.testing.assert_close(second[name], grad, rtol=1e-5, atol=1e-6,
                                       msg=lambda m, name=name: f"{wrapping}: gradient {name} differs across ranks: {m}")
    losses = [r["eager"]["losses"][0] for r in ddp_results]
    assert not torch.equal(losses[0], losses[1]), "the ranks saw the same batch: the all-reduce is not exercised"


@pytest.mark.parametrize("wrapping", ["ddp_of_compiled", "compiled_ddp", "ddp_of_ortmodule"])
def test_compiled_ddp_is_split_at_bucket_boundaries(ddp_results, wrapping):
    """Either way round, the graph TorchDynamo traces while DDP's forward is active goes through
    DDPOptimizer, which hands the engine one graph per bucket: the backward graph of the last
    bucket finishes, and its all-reduce starts, while the engine computes the next one."""
    for rank, result in enumerate(ddp_results):
        graphs = result[wrapping]["forward_graphs"]
        assert graphs >= 2, (f"rank {rank}: {wrapping} gave the engine {graphs} forward graph(s); DDPOptimizer "
                             f"should have split ~2 MB of parameters at 1 MB buckets")
