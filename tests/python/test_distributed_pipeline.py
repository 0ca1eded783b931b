"""A DeepSpeed PipelineModule of 2 stages on 2 CPU ranks (gloo, loopback) whose stages run in "ort",
against the same pipeline in eager.

Four micro-batches per step (gradient accumulation 4), three steps, plain SGD: with no momentum a
parameter's change is -lr times its accumulated gradient, so comparing every parameter after every
step compares the gradients too. Each rank holds one stage and compiles it.

- PipelineModule.compile(backend="ort"): DeepSpeed calls Module.compile on each layer of the stage;
- each stage wrapped explicitly: the layers handed to PipelineModule are ORTModules.

The ranks exit the way a DeepSpeed script does (no destroy_process_group); run_on_ranks fails the
test unless both exit with status 0.
"""

from __future__ import annotations

import sys

import deepspeed  # noqa: F401 - a dev requirement: its absence fails this module
import pytest
import torch
from torch import nn

from distributed_harness import (
    assert_compiled_on_every_rank,
    assert_same_training,
    local,
    new_record,
    ort_counters,
    reset_compilation,
    run_on_ranks,
)
from distributed_models import Block, batch, nonzero

STEPS = 3
MICRO_BATCHES = 4
ROWS = 2
WIDTH, HIDDEN, OUT = 32, 64, 4
LR = 0.05


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(WIDTH, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _layers(wrap) -> list[nn.Module]:
    """Block, Block | Block, Head: two layers per stage, the same weights on every rank."""
    layers = [Block(WIDTH, HIDDEN), Block(WIDTH, HIDDEN), Block(WIDTH, HIDDEN), Head()]
    with torch.no_grad():
        for i, p in enumerate(p for layer in layers for p in layer.parameters()):
            p.copy_(nonzero(p.shape, seed=i, scale=0.5 / p.shape[-1] ** 0.5))
    return [wrap(layer) for layer in layers]


def _pipeline(wrapping: str):
    from deepspeed.pipe import PipelineModule
    from torch_ort_backend import ORTModule

    layers = _layers(ORTModule if wrapping == "stages_wrapped" else (lambda m: m))
    net = PipelineModule(layers=layers, num_stages=2, loss_fn=nn.MSELoss(), partition_method="uniform")
    if wrapping == "pipeline_compile":
        net.compile(backend="ort")
    config = {"train_micro_batch_size_per_gpu": ROWS, "gradient_accumulation_steps": MICRO_BATCHES,
              "steps_per_print": 10**9}
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    engine, _, _, _ = deepspeed.initialize(model=net, optimizer=optimizer, config=config)
    return engine


def _train(wrapping: str) -> dict:
    reset_compilation()
    engine = _pipeline(wrapping)
    record = new_record()
    for step in range(STEPS):
        micro = [batch(step * MICRO_BATCHES + m, 0, rows=ROWS, width=WIDTH, out=OUT) for m in range(MICRO_BATCHES)]
        record["losses"].append(engine.train_batch(iter(micro)).detach().float().clone())
        record["params"].append({name: local(p) for name, p in engine.module.named_parameters()})
    record["counters"] = ort_counters()
    record["stage"] = engine.stage_id
    return record


def pipeline_worker(rank: int, world_size: int) -> dict:
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # see test_distributed_deepspeed.py
    deepspeed.init_distributed(dist_backend="gloo")
    return {wrapping: _train(wrapping) for wrapping in ("eager", "pipeline_compile", "stages_wrapped")}


@pytest.fixture(scope="module")
def pipeline_results():
    return run_on_ranks("test_distributed_pipeline:pipeline_worker")


@pytest.mark.parametrize("wrapping", ["pipeline_compile", "stages_wrapped"])
def test_pipeline_stages_in_ort_train_like_eager(pipeline_results, wrapping):
    assert [r[wrapping]["stage"] for r in pipeline_results] == [0, 1]
    assert_compiled_on_every_rank([r[wrapping] for r in pipeline_results], wrapping, min_graphs=2)
    for rank, result in enumerate(pipeline_results):
        # Every layer of the stage ran its forward and backward in the engine for every micro-batch.
        assert result[wrapping]["counters"]["runs"] >= STEPS * MICRO_BATCHES * 2 * 2, result[wrapping]["counters"]
        assert_same_training(result["eager"], result[wrapping], f"{wrapping}: stage {rank}")
