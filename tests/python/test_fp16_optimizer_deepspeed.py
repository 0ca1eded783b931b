"""FP16_Optimizer on the real DeepSpeed (pinned in requirements-dev.txt): ZeRO stage 1 and 2, fp16
and bf16, in this one process on CPU (world size 1, gloo).

The reference is DeepSpeed itself. The patch replaces methods on the optimizer instance, so
DeepSpeedZeroOptimizer's own methods, called through the class, still compute DeepSpeed's answer
on the same gradients: the replaced overflow checks must agree with them (clean gradients, one
injected inf / -inf / NaN) and the replaced L2 norm must equal them and a float64 torch norm. Then
a patched and an unpatched engine, built identically, train side by side on the same random
batches with gradient clipping active: the same parameters after every step (to within float32
rounding: the norm, which sets the clipping factor, may differ from DeepSpeed's in its last bit),
and an injected overflow makes both skip that step and move the loss scale identically (fp16:
dynamic loss scaling; bf16: the step is skipped, the scale stays 1).

Two things are changed on DeepSpeed for these tests, both outside what is compared:
- fp16: DeepSpeed's CPU accelerator reports fp16 as unsupported unless mkldnn has native fp16
  (AVX512-FP16 / AMX-FP16), and deepspeed.initialize then refuses the config ("Type fp16 is not
  supported on your device."). torch computes fp16 Linear layers on any CPU, so the accelerator is
  told fp16 is supported; the ZeRO fp16 path (dynamic loss scaler) is what is under test.
- DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce op when it starts (about a
  minute, with a C++ compiler); it only serves inference_all_reduce with more than one rank, so
  it is not built here.
"""

import math
import socket
import sys

import deepspeed  # a dev requirement: a missing DeepSpeed fails this module, it does not skip
import pytest
import torch
from deepspeed.accelerator import get_accelerator
from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

import torch_ort_backend.optim._modifiers as modifiers
from torch_ort_backend.optim import FP16_Optimizer

CONFIGS = [(1, "fp16"), (2, "fp16"), (1, "bf16"), (2, "bf16")]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
IN, HIDDEN, OUT, BATCH = 8, 16, 3, 4


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def process_group():
    """One gloo rank for the module; destroyed afterwards so that no other test sees it."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0", "LOCAL_RANK": "0",
           "WORLD_SIZE": "1"}
    mp = pytest.MonkeyPatch()
    for key, value in env.items():
        mp.setenv(key, value)
    mp.setattr(sys.modules["deepspeed.comm.torch"], "build_shm_op", lambda: None)
    mp.setattr(get_accelerator(), "is_fp16_supported", lambda: True)
    assert not torch.distributed.is_initialized(), "another test left a process group behind"
    deepspeed.init_distributed(dist_backend="gloo")
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()
        deepspeed.comm.comm.cdb = None  # so that a later init_distributed starts afresh
        mp.undo()


def nonzero(shape, seed, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    mag = torch.rand(shape, generator=g, dtype=torch.float64) * 1.9 + 0.1
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()
    return (mag * sign * scale).to(dtype)


def make_engine(stage, precision, patched, clip=0.05):
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(nonzero(p.shape, seed=i, scale=0.3))
    half = {"enabled": True}
    if precision == "fp16":  # a small scale that grows every 2 good steps and halves on the first overflow
        half.update(initial_scale_power=10, loss_scale_window=2, hysteresis=1, min_loss_scale=1)
    config = {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_clipping": clip,
        "zero_optimization": {"stage": stage},
        precision: half,
        "steps_per_print": 10**9,
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    assert type(engine.optimizer) is DeepSpeedZeroOptimizer
    if patched:
        assert FP16_Optimizer(engine.optimizer) is engine.optimizer
    return engine


def batch(step, precision):
    dtype = DTYPES[precision]
    return nonzero((BATCH, IN), seed=100 + step, dtype=dtype), nonzero((BATCH, OUT), seed=200 + step, dtype=dtype)


def backward(engine, step, precision):
    x, y = batch(step, precision)
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))


def partition_grads(engine):
    """The gradients DeepSpeed's step reads (group 0; these models have one group): one per
    parameter, then any alignment padding."""
    opt = engine.optimizer
    assert len(opt.bit16_groups) == 1
    return opt.averaged_gradients[0]


def original(name, opt, *args):
    return getattr(DeepSpeedZeroOptimizer, name)(opt, *args)


def test_the_same_optimizer_comes_back_patched():
    engine = make_engine(2, "fp16", patched=False)
    opt = engine.optimizer
    assert FP16_Optimizer(opt) is opt
    assert opt._tob_fp16_modifier == "DeepSpeed ZeRO"
    for name in ("has_overflow_serial", "has_overflow_partitioned_grads_serial", "get_grad_norm_direct"):
        assert name in vars(opt), f"{name} is not replaced on the instance"
        assert getattr(DeepSpeedZeroOptimizer, name) is not vars(opt)[name].__func__
    with pytest.raises(TypeError, match="take no options"):
        FP16_Optimizer(opt, init_scale=2.0)


@pytest.mark.parametrize("stage,precision", CONFIGS)
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_overflow_checks_agree_with_deepspeed(stage, precision, bad):
    engine = make_engine(stage, precision, patched=True)
    opt = engine.optimizer
    backward(engine, 1, precision)
    grads = partition_grads(engine)
    assert len(grads) >= 4 and all(bool(g.ne(0).any()) for g in grads[:4])

    def both():
        ours = opt.has_overflow_partitioned_grads_serial()
        theirs = original("has_overflow_partitioned_grads_serial", opt)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape and ours.device == theirs.device
        assert torch.equal(ours, theirs)
        return bool(ours)

    assert both() is False
    grads[2].view(-1)[7] = bad  # one element of one parameter's gradient
    assert both() is True
    assert opt.has_overflow() is True  # DeepSpeed's caller (all-reduced over the data-parallel group)

    params = list(engine.module.parameters())
    for i, p in enumerate(params):
        p.grad = nonzero(p.shape, seed=300 + i, dtype=DTYPES[precision])
    assert bool(opt.has_overflow_serial(params)) is False
    assert torch.equal(opt.has_overflow_serial(params), original("has_overflow_serial", opt, params))
    params[0].grad[3, 5] = bad
    assert bool(opt.has_overflow_serial(params)) is True
    assert torch.equal(opt.has_overflow_serial(params), original("has_overflow_serial", opt, params))
    for p in params:
        p.grad = None


@pytest.mark.parametrize("stage,precision", CONFIGS)
def test_grad_norm_equals_deepspeed_and_float64(stage, precision):
    engine = make_engine(stage, precision, patched=True)
    opt = engine.optimizer
    backward(engine, 2, precision)
    grads, params = partition_grads(engine), opt.params_in_partition[0]
    assert len(params) == 4

    def both():
        ours, theirs = opt.get_grad_norm_direct(grads, params), original("get_grad_norm_direct", opt, grads, params)
        assert ours.dtype == theirs.dtype == torch.float32 and ours.dim() == theirs.dim() == 0
        return float(ours), float(theirs)

    ours, theirs = both()
    expect = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads[:4]))
    assert expect > 0
    assert ours == pytest.approx(expect, rel=2e-7)
    assert ours == pytest.approx(theirs, rel=2e-7)
    # The norm DeepSpeed's step takes (unscaled by the loss scale) agrees too.
    assert float(opt.scaled_global_norm()) == pytest.approx(expect, rel=2e-7)

    params[1].ds_pipe_replicated = True  # counted on another pipeline stage: both leave it out
    try:
        ours, theirs = both()
    finally:
        del params[1].ds_pipe_replicated
    expect = math.sqrt(sum(float(g.double().pow(2).sum()) for i, g in enumerate(grads[:4]) if i != 1))
    assert ours == pytest.approx(expect, rel=2e-7) and ours == pytest.approx(theirs, rel=2e-7)

    # The inf norm is DeepSpeed's own.
    assert torch.equal(opt.get_grad_norm_direct(grads, params, float("inf")),
                       original("get_grad_norm_direct", opt, grads, params, float("inf")))

    for bad in (float("inf"), float("nan")):
        grads[3].view(-1)[1] = bad
        assert both() == (-1.0, -1.0)


def _snapshot(engine):
    opt = engine.optimizer
    return ([p.detach().clone() for p in engine.module.parameters()],
            [t.detach().clone() for t in opt.single_partition_of_fp32_groups])


@pytest.mark.parametrize("stage,precision", CONFIGS)
@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_training_matches_unpatched_deepspeed_and_skips_overflow(stage, precision, bad, monkeypatch):
    calls = {"has_non_finite": 0, "l2_norm": 0}
    for name in calls:
        fn = getattr(modifiers, name)

        def counted(*args, _fn=fn, _name=name, **kwargs):
            calls[_name] += 1
            return _fn(*args, **kwargs)

        monkeypatch.setattr(modifiers, name, counted)

    ours, ref = make_engine(stage, precision, patched=True), make_engine(stage, precision, patched=False)
    overflow_step = 4
    scales = []
    for step in range(1, 8):
        before = _snapshot(ours)
        for engine in (ours, ref):
            backward(engine, step, precision)
            if step == overflow_step:
                partition_grads(engine)[1].view(-1)[-1] = bad
        scale_before = ours.optimizer.loss_scale
        for engine in (ours, ref):
            engine.step()
        scales.append(ours.optimizer.loss_scale)

        assert ours.optimizer.overflow == ref.optimizer.overflow == (step == overflow_step)
        assert ours.skipped_steps == ref.skipped_steps == int(step >= overflow_step)
        assert ours.optimizer.loss_scale == ref.optimizer.loss_scale
        if step == overflow_step:
            after = _snapshot(ours)
            for a, b in zip(before[0] + before[1], after[0] + after[1]):
                assert torch.equal(a, b), "the overflow step must leave every parameter as it was"
            expect_scale = scale_before / 2 if precision == "fp16" else 1.0
            assert ours.optimizer.loss_scale == expect_scale
            assert float(ours.get_global_grad_norm()) == float(ref.get_global_grad_norm()) == float("inf")
        else:
            norm = float(ours.get_global_grad_norm())
            assert norm == pytest.approx(float(ref.get_global_grad_norm()), rel=2e-7)
            assert norm > 0.05, "clipping is active, so the norm matters"
        mine, theirs = _snapshot(ours), _snapshot(ref)
        for a, b in zip(mine[0] + mine[1], theirs[0] + theirs[1]):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)

    if precision == "fp16":
        # DeepSpeed's DynamicLossScaler doubles the scale after a good step whose distance from the
        # last overflow (the start counting as an overflow at step 0), less one, is a positive multiple of
        # loss_scale_window (2), and halves it on an overflow (hysteresis 1).
        assert scales == [1024, 1024, 2048, 1024, 1024, 1024, 2048]
    # every step ran the replaced overflow check, every good step the replaced norm
    assert calls["has_non_finite"] == 7 and calls["l2_norm"] == 6
