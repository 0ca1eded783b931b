"""DeepSpeed ZeRO 1, 2 and 3 with "ort" on 2 CPU ranks (gloo, loopback), against the same engine in
eager; DeepSpeed 0.19.8 is a dev requirement, so a missing DeepSpeed fails this module.

Each stage is trained three ways, as docs/distributed.md lists them:
- ORTModule + FusedAdam + deepspeed.initialize + FP16_Optimizer: onnxruntime-training's "putting
  it all together" snippet (FP16_Optimizer patches ZeRO 1/2's optimizer; ZeRO 3 keeps its own);
- torch.compile(model, backend="ort") before deepspeed.initialize (ZeRO 1/2 only: ZeRO 3 fails
  on torch.compile's wrapper with any backend, "'dict' object has no attribute '_in_forward'",
  as DeepSpeed marks the wrapper's own parameter dict, which it never converted);
- engine.compile(backend="ort") after it (all stages).
bf16 throughout (the CPU accelerator's precision), plus fp16 with dynamic loss scaling for ZeRO 2
(see test_fp16_optimizer_deepspeed.py for why the CPU accelerator is told fp16 is supported).
Compared per step: the loss, every full gradient (deepspeed.utils.safe_get_full_grad) and every
full fp32 master parameter (safe_get_full_fp32_param) after the step.

Checkpoints: an engine trained with ORTModule (ZeRO 2) and one compiled with engine.compile
(ZeRO 3) save through DeepSpeed; a fresh eager engine loads each, and it must hold the same
master parameters and take the same next step as the engine that saved it.

FusedAdam is not in DeepSpeed's list of tested ZeRO optimizers and DeepSpeed has no public way to
add one, so the config carries zero_allow_untested_optimizer (docs/distributed.md says so).
"""

from __future__ import annotations

import sys
import tempfile

import deepspeed  # noqa: F401 - a dev requirement: its absence fails this module
import pytest
import torch

from distributed_harness import (
    assert_compiled_on_every_rank,
    assert_same_training,
    new_record,
    ort_counters,
    reset_compilation,
    run_on_ranks,
)
from distributed_models import batch, make_block_stack

STEPS = 3
ROWS = 4
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# (stage, precision, wrapping): each compared with (stage, precision, "eager").
CONFIGS = [(stage, "bf16", wrapping) for stage in (1, 2, 3) for wrapping in ("eager", "ortmodule", "engine_compile")]
CONFIGS += [(stage, "bf16", "compile") for stage in (1, 2)]
CONFIGS += [(2, "fp16", "eager"), (2, "fp16", "ortmodule")]
CHECKPOINTED = [(2, "bf16", "ortmodule"), (3, "bf16", "engine_compile")]


def _config(stage: int, precision: str) -> dict:
    half: dict = {"enabled": True}
    if precision == "fp16":  # a small scale that grows every 2 clean steps
        half.update(initial_scale_power=8, loss_scale_window=2, hysteresis=1, min_loss_scale=1)
    return {
        "train_micro_batch_size_per_gpu": ROWS,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        precision: half,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }


def _engine(stage: int, precision: str, wrapping: str):
    from torch_ort_backend import ORTModule
    from torch_ort_backend.optim import FP16_Optimizer, FusedAdam

    model = make_block_stack()
    if wrapping == "ortmodule":
        model = ORTModule(model)
    elif wrapping == "compile":
        model = torch.compile(model, backend="ort")
    optimizer = FusedAdam(model.parameters(), lr=1e-2, weight_decay=0.01)
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=_config(stage, precision))
    if stage in (1, 2) and wrapping != "eager":
        assert FP16_Optimizer(optimizer) is optimizer
    if wrapping == "engine_compile":
        engine.compile(backend="ort")
    return engine


def _named_parameters(engine):
    # torch.compile's wrapper prefixes names with _orig_mod.; the eager engine's names are the reference.
    return [(name.replace("_orig_mod.", ""), p) for name, p in engine.module.named_parameters()]


def _step(engine, step: int, rank: int, precision: str, record: dict) -> None:
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_grad

    x, y = batch(step, rank, rows=ROWS, dtype=DTYPES[precision])
    loss = engine(x, y)
    engine.backward(loss)
    record["losses"].append(loss.detach().float().clone())
    record["grads"].append({name: safe_get_full_grad(p).float().clone() for name, p in _named_parameters(engine)})
    engine.step()
    record["params"].append({name: safe_get_full_fp32_param(p).float().clone()
                             for name, p in _named_parameters(engine)})


def _train(stage: int, precision: str, wrapping: str, rank: int, checkpoint_dir: str | None) -> dict:
    reset_compilation()
    engine = _engine(stage, precision, wrapping)
    record = new_record()
    for step in range(STEPS):
        _step(engine, step, rank, precision, record)
    record["counters"] = ort_counters()
    if checkpoint_dir is not None:
        engine.save_checkpoint(checkpoint_dir, tag="t")
        after = new_record()
        _step(engine, STEPS, rank, precision, after)
        record["next_step"] = after
    return record


def _resume_in_eager(stage: int, precision: str, rank: int, checkpoint_dir: str) -> dict:
    from deepspeed.utils import safe_get_full_fp32_param

    engine = _engine(stage, precision, "eager")
    engine.load_checkpoint(checkpoint_dir, tag="t")
    loaded = {name: safe_get_full_fp32_param(p).float().clone() for name, p in _named_parameters(engine)}
    record = new_record()
    _step(engine, STEPS, rank, precision, record)
    return {"loaded": loaded, "next_step": record}


def deepspeed_worker(rank: int, world_size: int) -> dict:
    from deepspeed.accelerator import get_accelerator

    # DeepSpeed's CPU backend JIT-builds a shared-memory all-reduce at start-up (about a minute with
    # a C++ compiler) that only inference_all_reduce uses; fp16: see the module docstring.
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    get_accelerator().is_fp16_supported = lambda: True
    deepspeed.init_distributed(dist_backend="gloo")
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        shared = [scratch]
        torch.distributed.broadcast_object_list(shared, src=0)  # one directory for both ranks' shards
        for config in CONFIGS:
            directory = f"{shared[0]}/{'_'.join(map(str, config))}" if config in CHECKPOINTED else None
            results[config] = _train(*config, rank, directory)
            if directory is not None:
                results[config + ("resumed",)] = _resume_in_eager(config[0], config[1], rank, directory)
        torch.distributed.barrier()  # rank 0's directory outlives rank 1's last read
    torch.distributed.destroy_process_group()
    return results


@pytest.fixture(scope="module")
def deepspeed_results():
    return run_on_ranks("test_distributed_deepspeed:deepspeed_worker", timeout=420)


# Both sides compute in 16 bits and their kernels sum in different orders, so tensors are compared
# by their relative error as a whole, about twice the format's epsilon (bf16 7.8e-3, fp16 9.8e-4);
# measured: 5.8e-3 and 8.2e-4 at most. Losses: element-wise.
TOLERANCES = {"bf16": {"rtol": 2e-2, "atol": 2e-3, "norm_rtol": 1.6e-2},
              "fp16": {"rtol": 5e-3, "atol": 5e-4, "norm_rtol": 2e-3}}


@pytest.mark.parametrize("stage,precision,wrapping", [c for c in CONFIGS if c[2] != "eager"])
def test_zero_trains_like_eager(deepspeed_results, stage, precision, wrapping):
    what = f"ZeRO {stage} {precision} {wrapping}"
    assert_compiled_on_every_rank([r[(stage, precision, wrapping)] for r in deepspeed_results], what)
    for rank, result in enumerate(deepspeed_results):
        assert_same_training(result[(stage, precision, "eager")], result[(stage, precision, wrapping)],
                             f"{what} on rank {rank}", **TOLERANCES[precision])


@pytest.mark.parametrize("stage,precision,wrapping", CHECKPOINTED)
def test_checkpoint_saved_with_ort_resumes_in_eager(deepspeed_results, stage, precision, wrapping):
    """The checkpoint holds exactly the trained master parameters, under the plain model's names,
    and the resumed eager engine takes the step the saving engine took next."""
    for rank, result in enumerate(deepspeed_results):
        saved, resumed = result[(stage, precision, wrapping)], result[(stage, precision, wrapping, "resumed")]
        assert sorted(resumed["loaded"]) == sorted(saved["params"][-1])
        for name, want in saved["params"][-1].items():
            torch.testing.assert_close(resumed["loaded"][name], want, rtol=0, atol=0,
                                       msg=lambda m, name=name: f"rank {rank}: {name} after load_checkpoint: {m}")
        assert_same_training(saved["next_step"], resumed["next_step"], f"rank {rank}: the step after resuming",
                             **TOLERANCES[precision])
