"""ORTTrainer with ZeRO stage 1 (`distributed.deepspeed_zero_optimization.stage = 1`) on 2 CPU ranks
(gloo on 127.0.0.1): each rank keeps the optimizer states of its half of the flattened weights only,
updates that half, and one all-gather in the graph hands both ranks the whole weights. The reference
is the same data-parallel run without ZeRO (itself checked against eager on the whole batch in
test_orttrainer_distributed.py) and torch.optim.AdamW in eager on the whole batch."""

import math
import os

import numpy as np
import pytest
import torch

from distributed_harness import init_gloo, run_on_ranks
from orttrainer_harness import LM_DESC, batches, lm_loss, make_model

WORLD = 2
LR = 0.01
WEIGHT_DECAY = 0.01


def _halves():
    return batches(4, shapes=((4, 6), (4, 5)))


def _options(rank: int, world_size: int, stage: int, accumulation: int = 1, **more):
    from torch_ort_backend import ORTTrainerOptions

    return ORTTrainerOptions({"distributed": {"world_size": world_size, "world_rank": rank, "local_rank": rank,
                                              "data_parallel_size": world_size,
                                              "deepspeed_zero_optimization": {"stage": stage}},
                              "batch": {"gradient_accumulation_steps": accumulation},
                              "utils": {"grad_norm_clip": False}, **more})


def _adam():
    from torch_ort_backend import optim

    # AdamOptimizer's default decay mode is torch's AdamW (test_orttrainer.py checks it).
    return optim.AdamConfig(lr=LR, lambda_coef=WEIGHT_DECAY)


def _train(trainer, rank: int, world_size: int, data) -> list[float]:
    losses = []
    for ids, labels in data:
        half = ids.shape[0] // world_size
        rows = slice(rank * half, (rank + 1) * half)
        losses.append(float(trainer.train_step(ids[rows], labels[rows])[0]))
    return losses


def _moment_elements(trainer) -> int:
    return sum(t.numel() for w in trainer._state.optimizer.values()
               for k, name in w.items() if k.startswith("Moment") for t in [trainer._state.tensor(name)])


def zero_and_plain(rank: int, world_size: int) -> dict:
    from torch_ort_backend import ORTTrainer

    init_gloo()
    out = {}
    data = _halves()
    for stage in (0, 1):
        model = make_model()
        trainer = ORTTrainer(model, LM_DESC, _adam(), loss_fn=lm_loss, options=_options(rank, world_size, stage))
        out[stage] = {
            "losses": _train(trainer, rank, world_size, data),
            "params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "state_dict": trainer.state_dict(),
            "moment_elements": _moment_elements(trainer),
            "ops": [(n.op_type, {a.name: a.s for a in n.attribute}.get("operator", b"").decode())
                    for n in trainer._onnx_model.graph.node],
        }
        if stage == 1:
            path = os.path.join(os.environ["TOB_ZERO_DIR"], f"rank{rank}.ortcp")
            trainer.save_checkpoint(path, {"rank": rank})
    return out


def zero_resume(rank: int, world_size: int) -> dict:
    """Two steps, a checkpoint per rank, then a fresh trainer loads its own file (or both files,
    aggregated) and takes two more steps: the same weights as four steps in one go."""
    from torch_ort_backend import ORTTrainer

    init_gloo()
    data = _halves()
    results = {}
    model = make_model()
    straight = ORTTrainer(model, LM_DESC, _adam(), loss_fn=lm_loss, options=_options(rank, world_size, 1))
    _train(straight, rank, world_size, data)
    results["straight"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    first = ORTTrainer(make_model(), LM_DESC, _adam(), loss_fn=lm_loss, options=_options(rank, world_size, 1))
    _train(first, rank, world_size, data[:2])
    directory = os.environ["TOB_ZERO_DIR"]
    first.save_checkpoint(os.path.join(directory, f"resume{rank}.ortcp"))
    torch.distributed.barrier()
    for how, paths in (("own", [f"resume{rank}.ortcp"]), ("aggregated", ["resume0.ortcp", "resume1.ortcp"])):
        model = make_model(seed=7)  # other initial weights: the checkpoint must replace them all
        resumed = ORTTrainer(model, LM_DESC, _adam(), loss_fn=lm_loss, options=_options(rank, world_size, 1))
        resumed.load_checkpoint(*[os.path.join(directory, p) for p in paths])
        _train(resumed, rank, world_size, data[2:])
        results[how] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return results


# A float16 loss scale far above what the scaled gradients can carry: the first steps overflow (in
# some gradients, not necessarily in both ranks' pieces) until the dynamic scaler has halved it enough.
OVERFLOWING_SCALE = float(2**21)


def zero_mixed_precision(rank: int, world_size: int) -> dict:
    """float16 mixed precision with a dynamic loss scale that overflows at first, without ZeRO and with
    it: per step the loss, the overflow flag and the scale, and the weights at the end."""
    from torch_ort_backend import ORTTrainer, amp

    init_gloo()
    data = batches(8, shapes=((4, 6), (4, 5)))
    out = {}
    for stage in (0, 1):
        model = make_model()
        scaler = amp.DynamicLossScaler(loss_scale=OVERFLOWING_SCALE, up_scale_window=3)
        options = _options(rank, world_size, stage,
                           mixed_precision={"enabled": True, "dtype": "float16", "loss_scaler": scaler})
        trainer = ORTTrainer(model, LM_DESC, _adam(), loss_fn=lm_loss, options=options)
        losses, finite, scales = [], [], []
        for ids, labels in data:
            half = ids.shape[0] // world_size
            rows = slice(rank * half, (rank + 1) * half)
            losses.append(float(trainer.train_step(ids[rows], labels[rows])[0]))
            finite.append(bool(trainer._train_step_info.all_finite))
            scales.append(scaler.loss_scale)
        graph = trainer._onnx_model.graph
        norms = [list(n.input) for n in graph.node if n.op_type == "ReduceAllL2"]
        out[stage] = {"losses": losses, "finite": finite, "scales": scales, "norm_inputs": norms,
                      "params": {n: p.detach().clone() for n, p in model.named_parameters()}}
    return out


def test_zero_with_mixed_precision_skips_the_same_updates_as_plain_data_parallel():
    """Every rank must judge overflow on the whole gradients: a rank that looked at its own pieces
    only could update while the other skips, and the gathered weights would mix two steps."""
    results = run_on_ranks("test_orttrainer_zero:zero_mixed_precision", world_size=WORLD, timeout=300)
    for rank, r in enumerate(results):
        plain, zero = r[0], r[1]
        assert not plain["finite"][0], "the first step must overflow for this test to test anything"
        assert any(plain["finite"]), "no step was finite: the scale never came down"
        assert zero["finite"] == plain["finite"], f"rank {rank}"
        assert zero["scales"] == plain["scales"], f"rank {rank}"
        assert zero["losses"] == pytest.approx(plain["losses"], rel=1e-6, abs=1e-7)
        # The overflow check reads the whole averaged gradients, not the pieces ZeRO slices out.
        assert zero["norm_inputs"] and not any("zero_piece" in g for g in zero["norm_inputs"][0])
        for name, p in zero["params"].items():
            torch.testing.assert_close(p, plain["params"][name], rtol=1e-6, atol=1e-7, msg=f"rank {rank} {name}")
            torch.testing.assert_close(p, results[0][1]["params"][name], rtol=0, atol=0,
                                       msg=f"ranks hold different weights for {name}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("zero")
    results = run_on_ranks("test_orttrainer_zero:zero_and_plain", world_size=WORLD, timeout=300,
                           env={"TOB_ZERO_DIR": str(directory)})
    return results, directory


def test_zero_stage1_trains_like_plain_data_parallel(runs):
    results, _ = runs
    for rank, r in enumerate(results):
        assert ("ATen", "tob::zero_all_gather") in r[1]["ops"], f"rank {rank}: no all-gather in the ZeRO graph"
        assert ("ATen", "tob::zero_all_gather") not in r[0]["ops"]
        assert r[1]["losses"] == pytest.approx(r[0]["losses"], rel=1e-6, abs=1e-7)
        for name, p in r[1]["params"].items():
            torch.testing.assert_close(p, r[0]["params"][name], rtol=1e-6, atol=1e-7, msg=f"rank {rank} {name}")
            torch.testing.assert_close(p, results[0][1]["params"][name], rtol=0, atol=0,
                                       msg=f"ranks hold different weights for {name}")


def test_zero_stage1_matches_eager_adamw_on_the_whole_batch(runs):
    results, _ = runs
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WEIGHT_DECAY)
    for ids, labels in _halves():
        opt.zero_grad()
        lm_loss(model(ids), labels).backward()
        opt.step()
    for name, p in model.named_parameters():
        torch.testing.assert_close(results[0][1]["params"][name], p.detach(), rtol=1e-4, atol=1e-6, msg=name)


def test_zero_stage1_holds_half_the_moments_per_rank(runs):
    results, _ = runs
    full = results[0][0]["moment_elements"]
    per_rank = [r[1]["moment_elements"] for r in results]
    assert sum(per_rank) == full
    assert max(per_rank) <= math.ceil(full / 2 / 2) * 2  # each rank: its chunk of both moments
    info = [set(r[1]["state_dict"]["partition_info"]) for r in results]
    assert info[0] & info[1], "the TinyLM's flat weights split inside a weight: both ranks must record it"


def test_zero_checkpoints_aggregate_into_the_unpartitioned_state(runs):
    from torch_ort_backend import ORTTrainer

    results, directory = runs
    plain = results[0][0]["state_dict"]["optimizer"]
    trainer = ORTTrainer(make_model(seed=3), LM_DESC, _adam(), loss_fn=lm_loss)
    user = trainer.load_checkpoint(str(directory / "rank1.ortcp"), str(directory / "rank0.ortcp"))
    assert user == {"rank": 0}
    sd = trainer.state_dict()
    assert sd["trainer_options"]["zero_stage"] == 0 and sd["trainer_options"]["world_size"] == 1
    for w, states in plain.items():
        for key, value in states.items():
            np.testing.assert_allclose(sd["optimizer"][w][key], value, rtol=1e-6, atol=1e-8, err_msg=f"{w}/{key}")
    for name, value in sd["model"]["full_precision"].items():
        np.testing.assert_array_equal(value, results[0][1]["params"][name].numpy(), err_msg=name)


def test_zero_checkpoint_of_one_rank_is_refused_by_an_unpartitioned_trainer(runs):
    from torch_ort_backend import ORTTrainer

    _, directory = runs
    trainer = ORTTrainer(make_model(), LM_DESC, _adam(), loss_fn=lm_loss)
    before = {n: p.detach().clone() for n, p in trainer._torch_model.named_parameters()}
    with pytest.raises(ValueError, match="missing"):
        trainer.load_checkpoint(str(directory / "rank0.ortcp"))
    for n, p in trainer._torch_model.named_parameters():
        assert torch.equal(p, before[n]), f"a refused checkpoint changed {n}"


def test_zero_resumes_from_its_own_or_aggregated_checkpoints(tmp_path):
    results = run_on_ranks("test_orttrainer_zero:zero_resume", world_size=WORLD, timeout=300,
                           env={"TOB_ZERO_DIR": str(tmp_path)})
    for rank, r in enumerate(results):
        for how in ("own", "aggregated"):
            for name, p in r[how].items():
                torch.testing.assert_close(p, r["straight"][name], rtol=0, atol=0, msg=f"rank {rank} {how} {name}")


def test_zero_with_lamb_is_refused_with_the_reason(monkeypatch):
    from torch_ort_backend.trainer.trainer_state import TrainerState
    from torch_ort_backend import optim

    with pytest.raises(NotImplementedError, match="trust ratio"):
        TrainerState(make_model(), optim.LambConfig(), [], False, zero_ranks=(2, 0))
