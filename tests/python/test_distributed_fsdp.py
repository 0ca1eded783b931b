"""FSDP2 (torch.distributed.fsdp.fully_shard) with "ort" on 2 CPU ranks (gloo, loopback).

GPT-2 (a small config) is sharded per transformer block (each transformer.h[i], then the root),
as torch's FSDP2 guide does, and compiled with torch.compile(model, backend="ort"). FSDP2's hooks
are excluded from TorchDynamo, so the graphs the engine gets are the blocks' computation; the
all-gather of each block's parameter shards before its forward and the reduce-scatter of its
gradients after its backward run in those hooks, in torch. Compared with the same sharded model
in eager: the loss of every step, this rank's gradient shards and parameter shards after AdamW.
"""

from __future__ import annotations

import pytest
import torch

from torch_ort_backend.testing.models import causal_lm_batch, make_gpt2
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

STEPS = 3


def _sharded_gpt2():
    from torch.distributed.fsdp import fully_shard

    model = make_gpt2()
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    return model


def _run(compiled: bool, rank: int) -> dict:
    reset_compilation()
    model = _sharded_gpt2()
    call = torch.compile(model, backend="ort") if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    record = new_record()
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = call(**causal_lm_batch(step + 100 * rank)).loss
        loss.backward()
        record["losses"].append(loss.detach().clone())
        record_grads(record, model.named_parameters())
        optimizer.step()
        record_params(record, model.named_parameters())
    record["counters"] = ort_counters()
    record["sharded"] = {name: (type(p).__name__, p.to_local().numel(), p.numel())
                         for name, p in model.named_parameters()}
    return record


def fsdp_worker(rank: int, world_size: int) -> dict:
    init_gloo()
    results = {"eager": _run(False, rank), "ort": _run(True, rank), "blocks": len(make_gpt2().transformer.h)}
    torch.distributed.destroy_process_group()
    return results


@pytest.fixture(scope="module")
def fsdp_results():
    return run_on_ranks("test_distributed_fsdp:fsdp_worker")


def test_fsdp2_per_block_compiled_trains_like_eager_fsdp2(fsdp_results):
    assert_compiled_on_every_rank([r["ort"] for r in fsdp_results], "torch.compile(fully_shard(GPT-2))",
                                  min_graphs=2)
    for rank, result in enumerate(fsdp_results):
        # Every block's forward and backward, every step, ran in the engine (not only the glue
        # around the blocks: embeddings, final norm, loss).
        blocks_per_step = 2 * result["blocks"]
        assert result["ort"]["counters"]["runs"] >= STEPS * blocks_per_step, result["ort"]["counters"]
        assert_same_training(result["eager"], result["ort"], f"FSDP2 + ort on rank {rank}", rtol=1e-4, atol=1e-5)


def test_fsdp2_parameters_stay_sharded(fsdp_results):
    """The engine saw full parameters only inside the blocks' graphs: what the model holds between
    steps is still each rank's shard (a DTensor holding about half of every matrix)."""
    for rank, result in enumerate(fsdp_results):
        for name, (kind, local, full) in result["ort"]["sharded"].items():
            assert kind == "DTensor", f"rank {rank}: parameter {name} is a {kind}, not an FSDP2 shard"
            if full >= 2 * 64:
                assert local <= (full + 1) // 2 + 64, f"rank {rank}: {name} holds {local} of {full} elements"
